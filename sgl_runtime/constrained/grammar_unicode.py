r"""Spells Python `re`'s Unicode class escapes (\d \w \s, \D \W \S) as explicit classes.

lark's lexer runs terminal regexes on `str`, where `\d`, `\w` and `\s` match Unicode digits,
word characters and blanks; interegular reads them as ASCII. Rewriting them as explicit code
point ranges (computed once from `re` itself) keeps grammar terminals exact. A negated escape
inside brackets (e.g. `[^\W]`) has no explicit spelling here and is refused.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache

from sgl_runtime.constrained.errors import ConstraintError

_ESCAPE = re.compile(r"\\[dwsDWS]")


def unicode_classes(pattern: str) -> str:
    """`pattern` with class escapes spelled out (unchanged without any, or with `(?a`)."""
    if "(?a" in pattern or not _ESCAPE.search(pattern):
        return pattern
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(_spelled(pattern[i + 1], in_class) or pattern[i:i + 2])
            i += 2
        elif not in_class and ch == "[":
            j = i + 1 + (pattern[i + 1:i + 2] == "^")
            j += pattern[j:j + 1] == "]"  # a leading ']' is a literal
            out.append(pattern[i:j])
            in_class, i = True, j
        else:
            in_class = in_class and ch != "]"
            out.append(ch)
            i += 1
    return "".join(out)


def _spelled(letter: str, in_class: bool):
    if letter.lower() not in "dws":
        return None
    body = _class_body(letter.lower())
    if letter.islower():
        return body if in_class else f"[{body}]"
    if in_class:
        raise ConstraintError(f"\\{letter} inside [...] is not supported in grammar terminals")
    return f"[^{body}]"


@lru_cache(maxsize=None)
def _class_body(letter: str) -> str:
    """Code point ranges `re` matches with \\d, \\w or \\s, as the inside of a [...] class."""
    rx = re.compile("\\" + letter)
    parts, start = [], None
    for cp in range(sys.maxunicode + 2):
        ok = cp <= sys.maxunicode and not 0xD800 <= cp <= 0xDFFF and rx.match(chr(cp)) is not None
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            end = cp - 1
            parts.append(_char(start) + (f"-{_char(end)}" if end > start else ""))
            start = None
    return "".join(parts)


def _char(cp: int) -> str:
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"
