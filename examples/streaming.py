"""Streaming: read a program's text (or one variable) chunk by chunk while it is generated.

Usage:
    python examples/streaming.py                        # starts a Runtime on the demo model
    python examples/streaming.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

import asyncio

from example_backend import example_backend

import sgl_lang as sgl


@sgl.function
def story(s, start):
    s += sgl.user("Continue the story: " + start)
    s += sgl.assistant(sgl.gen("story", max_tokens=24))


async def stream_async(start: str) -> str:
    state = story.run(start=start, stream=True, temperature=0)
    return "".join([chunk async for chunk in state.text_async_iter("story")])


def main() -> None:
    with example_backend(__doc__):
        state = story.run(start="Once upon a time", stream=True, temperature=0)
        chunks = []
        for chunk in state.text_iter():
            chunks.append(chunk)
            print(chunk, end="", flush=True)
        print()
        assert "".join(chunks) == state.text()
        assert asyncio.run(stream_async("Once upon a time")) == state["story"]
        assert story.run(start="Once upon a time", temperature=0)["story"] == state["story"]


if __name__ == "__main__":
    main()
