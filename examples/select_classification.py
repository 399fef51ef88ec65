"""Classification with select: every choice is scored from exact prompt logprobs in one request.

Usage:
    python examples/select_classification.py                        # starts a Runtime on the demo model
    python examples/select_classification.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

from example_backend import example_backend

import sgl_lang as sgl

LABELS = ["positive", "negative", "neutral"]


@sgl.function
def classify(s, review):
    s += "Review: " + review + "\nSentiment: "
    s += sgl.select("label", choices=LABELS)
    s += "\nConfidence method 2: " + sgl.gen("label_greedy", choices=LABELS, choices_method=sgl.greedy_token_selection)


def main() -> None:
    with example_backend(__doc__):
        for review in ["I loved every minute of it.", "The plot made no sense at all."]:
            state = classify.run(review=review)
            scores = state.get_meta_info("label")["normalized_prompt_logprobs"]
            print(f"{review!r}: {state['label']} (greedy: {state['label_greedy']})")
            print("  scores:", dict(zip(LABELS, (round(x, 3) for x in scores))))
            assert state["label"] in LABELS and state["label_greedy"] in LABELS
            assert state["label"] == LABELS[scores.index(max(scores))]


if __name__ == "__main__":
    main()
