"""A multi-turn chat: roles are formatted with the served model's own chat template.

Usage:
    python examples/quick_start.py                        # starts a Runtime on the demo model
    python examples/quick_start.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

from example_backend import example_backend

import sgl_lang as sgl


@sgl.function
def multi_turn_question(s, question_1, question_2):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question_1)
    s += sgl.assistant(sgl.gen("answer_1", max_tokens=32))
    s += sgl.user(question_2)
    s += sgl.assistant(sgl.gen("answer_2", max_tokens=32))


def main() -> None:
    with example_backend(__doc__):
        state = multi_turn_question.run(
            question_1="What is the capital of the United States?",
            question_2="List two local attractions.",
            temperature=0,
        )
        for message in state.messages():
            print(f"{message['role']}: {message['content']!r}")
        meta = state.get_meta_info("answer_1")
        print("answer_1 tokens:", {k: meta.get(k) for k in ("prompt_tokens", "completion_tokens", "cached_tokens")})
        assert state.messages()[-1]["content"] == state["answer_2"]


if __name__ == "__main__":
    main()
