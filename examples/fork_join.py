"""Parallel branches: fork a program after a shared prefix (cached once), then gather the results.

Usage:
    python examples/fork_join.py                        # starts a Runtime on the demo model
    python examples/fork_join.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

from example_backend import example_backend

import sgl_lang as sgl


@sgl.function
def tip_suggestion(s, topic):
    s += f"Here are two tips for staying healthy while {topic}: 1. Balanced Diet. 2. Regular Exercise.\n\n"
    forks = s.fork(2)  # commits the prefix first, so both branches reuse its cache
    for i, f in enumerate(forks):
        f += f"Now, expand tip {i + 1} into a paragraph:\n"
        f += sgl.gen("detailed_tip", max_tokens=24, stop="\n\n")
    s += "Tip 1:" + forks[0]["detailed_tip"] + "\n"
    s += "Tip 2:" + forks[1]["detailed_tip"] + "\n"
    s += "In summary" + sgl.gen("summary", max_tokens=16)
    forks.join()  # the parent now also holds detailed_tip as a list of both values
    return [f.get_meta_info("detailed_tip").get("cached_tokens") for f in forks]


def main() -> None:
    with example_backend(__doc__):
        state = tip_suggestion.run(topic="travelling", temperature=0)
        print(state.text())
        tips = state["detailed_tip"]
        assert isinstance(tips, list) and len(tips) == 2
        print("branch tips:", tips)
        print("prefix tokens each branch found cached:", state.ret_value)


if __name__ == "__main__":
    main()
