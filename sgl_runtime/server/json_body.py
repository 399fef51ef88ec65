"""Reading a request body as JSON with limits: a size cap (413), a nesting-depth cap, integers of
bounded length, finite numbers only (NaN/Infinity named by field), and no lone UTF-16 surrogates in strings or keys (all 400s),
so that no body can reach a handler in a shape that later raises a 5xx."""

from __future__ import annotations

import json
import math
from typing import Any

from sgl_runtime.sampling_params import InvalidRequestError

MAX_BODY_BYTES = 64 * 2**20
MAX_DEPTH = 64
MAX_INT_DIGITS = 40  # far beyond 64 bits; longer integers are a 400, not a ValueError from int()


class BodyTooLargeError(InvalidRequestError):
    """The request body exceeds the server's size limit (HTTP 413)."""


async def read_body(request: Any, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, refusing (413) as soon as more than `max_bytes` arrive or are announced."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLargeError(f"the request body has {declared} bytes, more than the limit of {max_bytes}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLargeError(f"the request body is larger than the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Decode `raw` as strict JSON; raise InvalidRequestError naming what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: not UTF-8 ({exc.reason})") from exc
    try:
        value = json.loads(text, parse_int=_parse_int)
    except RecursionError as exc:
        raise InvalidRequestError(f"the request body is nested too deeply (more than {max_depth} levels)") from exc
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc
    check_json_value(value, max_depth)
    return value


async def json_body(request: Any, max_bytes: int = MAX_BODY_BYTES) -> Any:
    return parse_json(await read_body(request, max_bytes))


def check_json_value(value: Any, max_depth: int = MAX_DEPTH, path: str = "") -> None:
    """Reject nesting deeper than `max_depth`, non-finite numbers and lone surrogates, naming the
    field (iterative, so any depth is safe)."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > max_depth:
            raise InvalidRequestError(f"the request body is nested too deeply (more than {max_depth} levels)")
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidRequestError(f"{path or 'body'}: must be a finite number, got {item}")
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, f"{path}.<key>" if path else "<key>")
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{path or 'body'}: contains a lone surrogate (\\u{ord(text[exc.start]):04x}), which is not valid Unicode"
        ) from exc


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise InvalidRequestError(
            f"the request body is not valid JSON for this API: an integer of {len(digits)} "
            f"digits (at most {MAX_INT_DIGITS})"
        )
    return int(digits)
