"""Serialising responses: JSON that tolerates non-finite floats (a masked token's logprob is
-inf), and server-sent events ending with `data: [DONE]`."""

from __future__ import annotations

import json
import math
from typing import Any, AsyncIterator

from fastapi.responses import JSONResponse


def dumps(obj: Any) -> str:
    """JSON text; non-finite floats (not valid JSON) become null."""
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), ensure_ascii=False, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


class SafeJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        # a lone surrogate (only possible in an echoed error message) becomes a JSON \u escape
        return dumps(content).encode("utf-8", "backslashreplace")


def sse_event(obj: Any) -> str:
    return f"data: {dumps(obj)}\n\n"


async def sse_stream(events: AsyncIterator[str], source: AsyncIterator) -> AsyncIterator[str]:
    """`events`, then `data: [DONE]`; closes `source` however the stream ends (a client that
    disconnects cancels the stream, and closing the source aborts its requests)."""
    try:
        async for event in events:
            yield event
        yield "data: [DONE]\n\n"
    finally:
        await source.aclose()
