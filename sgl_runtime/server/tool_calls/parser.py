"""Parses tool calls out of generated text in one format, whole or as a growing prefix.

`scan(text, fmt, final)` splits the text into normal content and calls. On a prefix
(`final=False`) it returns only what cannot change any more: content up to a possible start of
the trigger, and calls as far as written (the name once complete, then the arguments so far),
so a stream can send the difference between two scans. A block that turns out malformed (only
possible without a constraint, or when generation stopped inside it) is content.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from sgl_runtime.server.tool_calls.formats import ToolCallFormat

_CALL_HEAD = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_COMPLETE, _INCOMPLETE, _MALFORMED = "complete", "incomplete", "malformed"


@dataclass
class ParsedCall:
    name: str
    arguments: str  # JSON text (a prefix of it while the call is still being written)
    complete: bool = False


@dataclass
class Scan:
    content: str = ""
    calls: list[ParsedCall] = field(default_factory=list)


def scan(text: str, fmt: ToolCallFormat, final: bool = True) -> Scan:
    """Content and calls of `text` (a prefix of the output when not `final`)."""
    out, pos, parts = Scan(), 0, []
    while True:
        i = text.find(fmt.trigger, pos)
        if i < 0:
            tail = text[pos:]
            parts.append(tail if final else tail[: len(tail) - _partial_suffix(tail, fmt.trigger)])
            break
        parts.append(text[pos:i])
        calls: list[ParsedCall] = []
        status, end = _block(text, i + len(fmt.trigger), fmt, calls, final)
        if status == _COMPLETE:
            out.calls.extend(calls)
            pos = end
            continue
        if status == _INCOMPLETE and not final:
            out.calls.extend(calls)
        elif final:
            parts.append(text[i:])  # malformed or cut short: it stays text
        break
    out.content = "".join(parts)
    return out


def _block(text: str, j: int, fmt: ToolCallFormat, calls: list[ParsedCall], final: bool) -> tuple[str, int]:
    status, j = _expect(text, j, fmt.block_start[len(fmt.trigger) :])
    if status != _COMPLETE:
        return status, j
    while True:
        status, j = _call(text, j, calls)
        if status != _COMPLETE:
            return status, j
        if fmt.call_separator:
            k = _skip_ws(text, j)
            sep = fmt.call_separator.strip()
            if text.startswith(sep, k):
                j = k + len(sep)
                continue
            if k == len(text) and not final:
                return _INCOMPLETE, j
        return _expect(text, j, fmt.block_end)


def _call(text: str, j: int, calls: list[ParsedCall]) -> tuple[str, int]:
    j = _skip_ws(text, j)
    head = _CALL_HEAD.match(text, j)
    if head is None:
        return _INCOMPLETE if _could_start_call(text[j:]) else _MALFORMED, j
    call = ParsedCall(json.loads(head.group(1)), "")
    calls.append(call)
    start = head.end()
    end = _value_end(text, start)
    if end is None:
        call.arguments = text[start:].rstrip()
        return _INCOMPLETE, len(text)
    if end < 0:
        return _MALFORMED, start
    call.arguments = text[start:end]
    try:
        json.loads(call.arguments)
    except ValueError:
        return _MALFORMED, start
    status, j = _expect(text, end, "}")
    call.complete = status == _COMPLETE
    return status, j


def _expect(text: str, j: int, literal: str) -> tuple[str, int]:
    """Skip blanks, then `literal` (compared without its own surrounding blanks)."""
    want = literal.strip()
    k = _skip_ws(text, j)
    if not want:
        return _COMPLETE, j
    got = text[k : k + len(want)]
    if got == want:
        return _COMPLETE, k + len(want)
    return (_INCOMPLETE if want.startswith(got) and k + len(got) == len(text) else _MALFORMED), j


def _value_end(text: str, start: int):
    """End index of the JSON object/array at `start`; None if not closed yet; -1 if not one."""
    k = _skip_ws(text, start)
    if k == len(text):
        return None
    if text[k] not in "{[":
        return -1
    depth, in_string, escaped = 0, False, False
    for i in range(k, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _could_start_call(rest: str) -> bool:
    """Whether `rest` may still grow into a call head (it is a prefix of one)."""
    compact = re.sub(r"\s+", "", rest)
    template = '{"name":"'
    return template.startswith(compact) or compact.startswith(template)


def _skip_ws(text: str, j: int) -> int:
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    return j


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
