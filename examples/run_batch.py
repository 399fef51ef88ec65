"""Many programs at once: run_batch keeps input order, shows a progress bar, and isolates failures.

Usage:
    python examples/run_batch.py                        # starts a Runtime on the demo model
    python examples/run_batch.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

from example_backend import example_backend

import sgl_lang as sgl


@sgl.function
def answer(s, question):
    s += sgl.system("Answer in a few words.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=12))


def main() -> None:
    questions = [f"What is {i} plus {i}?" for i in range(16)]
    with example_backend(__doc__):
        states = answer.run_batch([{"question": q} for q in questions], progress_bar=True, temperature=0)
        for question, state in zip(questions, states):
            assert state.error() is None, state.error()
            assert question in state.text()
        print(f"{len(states)} programs, first answer: {states[0]['answer']!r}")


if __name__ == "__main__":
    main()
