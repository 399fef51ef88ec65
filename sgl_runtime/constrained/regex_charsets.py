"""The character set each single-character node of a parsed Python regex matches, exactly.

Constraints read shorthand classes as ASCII (`re.ASCII`: `\\d` = [0-9], `\\w` = [A-Za-z0-9_],
`\\s` = [ \\t\\n\\r\\f\\v]), and so does case folding under `(?i)` (only A-Z <-> a-z), which is
what `re` itself does with `re.ASCII`. Nodes come from `re._parser`, the parser `re` uses.
"""

from __future__ import annotations

import functools
import itertools
import re
from re import _constants as sre

from sgl_runtime.constrained.automata import ANY_CHAR, Charset, charset
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_properties import merge_ranges

IGNORECASE, DOTALL, MULTILINE = re.IGNORECASE.value, re.DOTALL.value, re.MULTILINE.value
DIGITS = charset("0123456789")
SPACES = charset(" \t\n\r\f\v")
WORD = charset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
NEWLINE = charset("\n")
MAX_CLASS_CHARS = 300_000  # a class (or its complement) listing more code points is refused
_SURROGATES = (0xD800, 0xDFFF)
_SURROGATE_CHARS = frozenset(map(chr, range(0xD800, 0xE000)))
_CATEGORIES = {
    sre.CATEGORY_DIGIT: DIGITS,
    sre.CATEGORY_NOT_DIGIT: ~DIGITS,
    sre.CATEGORY_SPACE: SPACES,
    sre.CATEGORY_NOT_SPACE: ~SPACES,
    sre.CATEGORY_WORD: WORD,
    sre.CATEGORY_NOT_WORD: ~WORD,
}
SINGLE_CHAR_OPS = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)


def node_charset(op, av, flags: int) -> Charset:
    """The characters matched by a LITERAL, NOT_LITERAL, ANY or IN node under `flags`."""
    fold = bool(flags & IGNORECASE)
    if op is sre.LITERAL:
        return _folded(charset(_char(av)), fold)
    if op is sre.NOT_LITERAL:
        return ~_folded(charset(_char(av)), fold)
    if op is sre.ANY:
        return ANY_CHAR if flags & DOTALL else ~NEWLINE
    return _class_charset(av, fold)


def _class_charset(items, fold: bool) -> Charset:
    negate = False
    ranges: list[tuple[int, int]] = []
    result = Charset(frozenset())
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            ranges.append((av, av))
        elif op is sre.RANGE:
            ranges.append(av)
        elif op is sre.CATEGORY:
            if av not in _CATEGORIES:
                raise ConstraintError(f"unsupported regex feature: character category {av}")
            result = result | _CATEGORIES[av]
        else:
            raise ConstraintError(f"unsupported regex feature: {op} inside a character class")
    result = result | _folded(_ranges_charset(tuple(ranges)), fold)
    return ~result if negate else result


@functools.lru_cache(maxsize=1024)
def _ranges_charset(ranges: tuple[tuple[int, int], ...]) -> Charset:
    """The union of code-point ranges, stored as itself or as the complement, whichever is small."""
    merged = merge_ranges(ranges)
    size = sum(hi - lo + 1 for lo, hi in merged)
    if size <= MAX_CLASS_CHARS:
        listed = frozenset(map(chr, itertools.chain.from_iterable(range(lo, hi + 1) for lo, hi in merged)))
        return Charset(listed - _SURROGATE_CHARS if any(lo <= 0xDFFF and hi >= 0xD800 for lo, hi in merged) else listed)
    gaps, prev = [], 0
    for lo, hi in (*merged, (0x110000, 0x110000)):
        gaps.append((prev, lo - 1))
        prev = hi + 1
    gap_chars = [c for lo, hi in gaps for c in range(lo, hi + 1) if not _is_surrogate(c)]
    if len(gap_chars) > MAX_CLASS_CHARS:
        raise ConstraintError(f"regex character class too large: {size} code points listed")
    return Charset(frozenset(map(chr, gap_chars)), True)


@functools.lru_cache(maxsize=1024)
def _folded(cs: Charset, fold: bool) -> Charset:
    if not fold:
        return cs
    if cs.negated:  # a large class stored as its complement: an excluded letter stays excluded
        return Charset(
            frozenset(
                c
                for c in cs.chars
                if not (c.isascii() and c.isalpha())  # only if
                or c.swapcase() in cs.chars
            ),
            True,
        )  # its other case is excluded too
    extra = frozenset(c.swapcase() for c in cs.chars if c.isascii() and c.isalpha())
    return Charset(cs.chars | extra)


def _char(code: int) -> str:
    return chr(code)


def _is_surrogate(code: int) -> bool:
    """Surrogates are never valid UTF-8, so no constraint can emit them."""
    return _SURROGATES[0] <= code <= _SURROGATES[1]
