r"""Spells Python `re`'s Unicode class escapes (\d \w \s, \D \W \S) as explicit classes, and
case-insensitive string terminals (`"select"i`) with every code point `re` folds together.

lark's lexer runs terminal regexes on `str`, where `\d`, `\w` and `\s` match Unicode digits,
word characters and blanks; interegular reads them as ASCII. Rewriting them as explicit code
point ranges (computed once from `re` itself) keeps grammar terminals exact. A negated escape
inside brackets (e.g. `[^\W]`) has no explicit spelling here and is refused. Likewise `re`
matches `(?i:s)` against 'ſ' (U+017F) and `(?i:k)` against the Kelvin sign; a case-insensitive
string is spelled as one explicit class per character (regex terminals with the i flag are left
to interegular, which folds ASCII and simple Unicode case pairs only).
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from typing import Optional

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
            out.append(_spelled(pattern[i + 1], in_class) or pattern[i : i + 2])
            i += 2
        elif not in_class and ch == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"  # a leading ']' is a literal
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


def folded_literal(value: str, flags) -> Optional[str]:
    """A regex for string `value` with the i flag, matching exactly what `re` matches, or None."""
    if "i" not in flags:
        return None
    parts = []
    for ch in value:
        variants = sorted(_case_variants(ch))
        parts.append(re.escape(ch) if len(variants) == 1 else "[" + "".join(map(re.escape, variants)) + "]")
    return "".join(parts)


def _case_variants(ch: str) -> set[str]:
    extra = getattr(getattr(re, "_casefix", None), "_EXTRA_CASES", {})
    found = {ch, ch.lower(), ch.upper(), ch.swapcase()}
    for c in list(found):
        if len(c) == 1:
            found.update(chr(x) for x in extra.get(ord(c), ()))
    probe = re.compile("(?i:" + re.escape(ch) + ")")
    return {c for c in found if len(c) == 1 and probe.fullmatch(c)}
