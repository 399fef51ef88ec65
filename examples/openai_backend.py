"""The same DSL on an OpenAI-compatible API (here the local server's /v1), with API speculative execution.

Usage:
    python examples/openai_backend.py                        # starts a Runtime on the demo model
    python examples/openai_backend.py http://127.0.0.1:30000 # or use a running server (also --url)

For a hosted API: sgl.OpenAI("gpt-4o-mini") with OPENAI_API_KEY set.
"""

from example_backend import example_backend

import sgl_lang as sgl


@sgl.function(num_api_spec_tokens=32)
def character(s, name):
    # Completion model: one call over-generates; later gens are filled from it when the text matches.
    s += name + " is a wizard.\nName: " + sgl.gen("name", stop="\n", max_tokens=8)
    s += "\nHouse: " + sgl.gen("house", stop="\n", max_tokens=8)


@sgl.function
def chat(s, question):
    s += sgl.system("You are terse.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=12))
    s += sgl.user("Is that right?")
    s += sgl.assistant(sgl.select("verdict", choices=["yes", "no"]))


def main() -> None:
    with example_backend(__doc__) as native:
        model, base_url = native.model_info["served_model_name"], native.base_url + "/v1"
        completion = sgl.OpenAI(model, base_url=base_url, is_chat_model=False)
        state = character.run(name="Harry", backend=completion, temperature=0)
        print(repr(state.text()))
        print("completion usage:", completion.token_usage)

        chat_model = sgl.OpenAI(model, base_url=base_url, is_chat_model=True)
        state = chat.run(question="What is 2 + 2?", backend=chat_model, temperature=0)
        for message in state.messages():
            print(f"{message['role']}: {message['content']!r}")
        assert state["verdict"] in ("yes", "no")
        print("chat usage:", chat_model.token_usage)


if __name__ == "__main__":
    main()
