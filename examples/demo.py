"""The README's demo: one LM program using free text, a regex, a JSON Schema, a grammar and select.

With no URL it starts a local runtime on the built-in demo model: a tiny random-weight Qwen2
with the real Qwen2.5 tokenizer. Its free text is noise; its constrained outputs are still
valid, and this script checks that they are.

Usage:
    python examples/demo.py                        # starts a Runtime on the demo model
    python examples/demo.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

import json
import re
from pathlib import Path

import lark

import sgl_lang as sgl
from example_backend import example_backend

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
def triage(s, report):
    s += sgl.system("You triage bug reports.")
    with s.user():
        s += "Bug report: " + report
    with s.assistant():
        s += "Summary: " + sgl.gen("summary", max_tokens=16, stop="\n") + "\n"
        s += "Due: " + sgl.gen("due", regex=DATE_REGEX) + "\n"
        s += "Ticket: " + sgl.gen("ticket", json_schema=TICKET_SCHEMA, max_tokens=96) + "\n"
        s += "Formula: " + sgl.gen("formula", grammar="arithmetic", max_tokens=24) + "\n"
        s += "Component: " + sgl.select("component", choices=["frontend", "runtime", "docs"])


def main() -> None:
    with example_backend(__doc__):
        state = triage.run(report="The server crashes when the prompt is empty.", temperature=1.0)
        print(state.text())
        print("-" * 60)
        print("summary (free text; noise on the demo model):", repr(state["summary"]))
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
        print("component (select) ->", state["component"], state.get_meta_info("component").get("normalized_prompt_logprobs"))
        assert state["component"] in ("frontend", "runtime", "docs")


if __name__ == "__main__":
    main()
