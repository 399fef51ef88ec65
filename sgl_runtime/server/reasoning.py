"""Reasoning parsers (`--reasoning-parser`, SGLang's names): split a reasoning model's output into
`reasoning_content` (inside <think>...</think>) and `content`, whole or as a growing prefix.

qwen3: reasoning when the output starts with <think> (or the prompt opened one: Qwen3 thinking
templates). deepseek-r1: the output always starts inside the reasoning (its template writes
<think> into the prompt), which ends at </think>.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    start: str = "<think>"
    end: str = "</think>"
    always_open: bool = False  # the output starts inside the reasoning whatever the prompt says

    def opens_in_reasoning(self, prompt_text: str) -> bool:
        """Whether generation starts inside the reasoning block (the prompt left one open)."""
        if self.always_open:
            return True
        tail = prompt_text.rstrip()
        return tail.endswith(self.start) or tail.rfind(self.start) > tail.rfind(self.end)


REASONING_FORMATS = {
    "qwen3": ReasoningFormat("qwen3"),
    "deepseek-r1": ReasoningFormat("deepseek-r1", always_open=True),
}
ALIASES = {"qwen3-thinking": "qwen3", "deepseek_r1": "deepseek-r1"}
REASONING_PARSER_NAMES = tuple(REASONING_FORMATS) + tuple(ALIASES)


def get_reasoning_format(name: str) -> ReasoningFormat:
    key = ALIASES.get(name, name)
    if key not in REASONING_FORMATS:
        raise ValueError(f"unknown reasoning parser {name!r}; expected one of {', '.join(REASONING_PARSER_NAMES)}")
    return REASONING_FORMATS[key]


def split_reasoning(text: str, fmt: ReasoningFormat, open_at_start: bool, final: bool = True) -> tuple[str, str, bool]:
    """(reasoning, content, reasoning_done) of `text`; on a prefix (not `final`) only what is settled."""
    body = text
    stripped = text.lstrip()
    if stripped.startswith(fmt.start):
        body, open_at_start = stripped[len(fmt.start) :], True
    elif not open_at_start:
        if not final and stripped and fmt.start.startswith(stripped):
            return "", "", False  # may still become <think>
        if not final and not stripped:
            return "", "", False
        return "", text, True
    k = body.find(fmt.end)
    if k >= 0:
        return body[:k].strip("\n"), body[k + len(fmt.end) :].lstrip("\n"), True
    if final:
        return body.strip("\n"), "", False
    held = _partial_suffix(body, fmt.end)
    return body[: len(body) - held].strip("\n"), "", False  # trailing newlines wait: they may end it


def _partial_suffix(text: str, marker: str) -> int:
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def reasoning_format_or_none(name: Optional[str]) -> Optional[ReasoningFormat]:
    return None if name is None else get_reasoning_format(name)
