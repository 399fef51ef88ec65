"""Unicode property escapes `\\p{..}` / `\\P{..}` rewritten as explicit code-point classes.

Python's `re` has no `\\p`; ECMA-262 patterns (JSON Schema, `u` flag) do. `expand_properties`
replaces each escape by the class of the code points that have the property, computed from
Python's `unicodedata` (Unicode `unicodedata.unidata_version`), so the regex compiled and the one
the self-check gives to `re` are the same text. Supported: General_Category values (`L`, `Lu`,
`Letter`, `General_Category=Lu`, `gc=Lu`, ...) and `Any`, `ASCII`, `Assigned`; everything else
(scripts, other binary properties) is refused with a ConstraintError naming it, since the
standard library cannot say exactly which code points have it.
"""

from __future__ import annotations

import functools
import sys
import unicodedata

from sgl_runtime.constrained.errors import ConstraintError

_GROUPS = {
    "L": ("Lu", "Ll", "Lt", "Lm", "Lo"),
    "LC": ("Lu", "Ll", "Lt"),
    "M": ("Mn", "Mc", "Me"),
    "N": ("Nd", "Nl", "No"),
    "P": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
    "S": ("Sm", "Sc", "Sk", "So"),
    "Z": ("Zs", "Zl", "Zp"),
    "C": ("Cc", "Cf", "Cs", "Co", "Cn"),
}
_LONG_NAMES = {  # the long names and aliases of PropertyValueAliases.txt (gc), as ECMA-262 lists them
    "Letter": "L",
    "Cased_Letter": "LC",
    "Uppercase_Letter": "Lu",
    "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm",
    "Other_Letter": "Lo",
    "Mark": "M",
    "Combining_Mark": "M",
    "Nonspacing_Mark": "Mn",
    "Spacing_Mark": "Mc",
    "Enclosing_Mark": "Me",
    "Number": "N",
    "Decimal_Number": "Nd",
    "digit": "Nd",
    "Letter_Number": "Nl",
    "Other_Number": "No",
    "Punctuation": "P",
    "punct": "P",
    "Connector_Punctuation": "Pc",
    "Dash_Punctuation": "Pd",
    "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe",
    "Initial_Punctuation": "Pi",
    "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po",
    "Symbol": "S",
    "Math_Symbol": "Sm",
    "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk",
    "Other_Symbol": "So",
    "Separator": "Z",
    "Space_Separator": "Zs",
    "Line_Separator": "Zl",
    "Paragraph_Separator": "Zp",
    "Other": "C",
    "Control": "Cc",
    "cntrl": "Cc",
    "Format": "Cf",
    "Surrogate": "Cs",
    "Private_Use": "Co",
    "Unassigned": "Cn",
}
_LEAVES = frozenset(c for group in _GROUPS.values() for c in group)
_BINARY = {"Any": None, "ASCII": ((0, 0x7F),), "Assigned": None}
Ranges = tuple[tuple[int, int], ...]


def expand_properties(pattern: str) -> str:
    """`pattern` with every `\\p{..}` / `\\P{..}` replaced by an explicit class (inside a class,
    by its ranges). Raises ConstraintError for an unsupported property or a class range that
    has a property escape as an endpoint."""
    if "\\p" not in pattern and "\\P" not in pattern:
        return pattern
    out: list[str] = []
    i, in_class, class_start, after_hyphen = 0, False, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and pattern[i + 1 : i + 2] in ("p", "P"):
            close = pattern.find("}", i)
            if pattern[i + 2 : i + 3] != "{" or close < 0:
                raise ConstraintError(f"invalid Unicode property escape in {pattern!r} (expected \\p{{Name}})")
            ranges = property_ranges(pattern[i + 3 : close])
            if pattern[i + 1] == "P":
                ranges = complement_ranges(ranges)
            if in_class:
                _check_not_range_endpoint(pattern, close, after_hyphen)
                out.append(class_body(ranges))
            else:
                out.append(f"[{class_body(ranges)}]" if ranges else "(?!)")
            i = close + 1
            continue
        after_hyphen = in_class and c == "-" and i > class_start
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = not (c == "]" and i > class_start)
        elif c == "[":
            in_class = True
            class_start = i + 1 + (pattern[i + 1 : i + 2] == "^")  # a `]` right here is a literal
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=128)
def property_ranges(name: str) -> Ranges:
    """The code points (as sorted, merged ranges) having the property `name`."""
    key, _, value = name.partition("=")
    if value:
        if key not in ("General_Category", "gc"):
            raise ConstraintError(
                f"unsupported Unicode property \\p{{{name}}}: only General_Category values, Any, ASCII and "
                "Assigned can be computed exactly from Python's unicodedata (scripts and other properties "
                "cannot)"
            )
        name = value
    elif name in _BINARY:
        if name == "ASCII":
            return ((0, 0x7F),)
        if name == "Any":
            return ((0, sys.maxunicode),)
        return complement_ranges(property_ranges("Cn"))
    category = _LONG_NAMES.get(name, name)
    if category in _LEAVES:
        return _category_table()[category]
    if category in _GROUPS:
        return merge_ranges(r for leaf in _GROUPS[category] for r in _category_table()[leaf])
    raise ConstraintError(
        f"unsupported Unicode property \\p{{{name}}}: not a General_Category value, Any, ASCII or Assigned "
        "(scripts and other properties cannot be computed exactly from Python's unicodedata)"
    )


def complement_ranges(ranges: Ranges) -> Ranges:
    gaps, prev = [], 0
    for lo, hi in ranges:
        if lo > prev:
            gaps.append((prev, lo - 1))
        prev = hi + 1
    if prev <= sys.maxunicode:
        gaps.append((prev, sys.maxunicode))
    return tuple(gaps)


def class_body(ranges: Ranges) -> str:
    return "".join(_escape(lo) if lo == hi else f"{_escape(lo)}-{_escape(hi)}" for lo, hi in ranges)


# ---- private ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _category_table() -> dict[str, Ranges]:
    """Every general category's code points, from one pass over the code space."""
    found: dict[str, list[list[int]]] = {}
    category = unicodedata.category
    for cp in range(sys.maxunicode + 1):
        runs = found.setdefault(category(chr(cp)), [])
        if runs and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return {cat: tuple((lo, hi) for lo, hi in runs) for cat, runs in found.items()}


def merge_ranges(ranges) -> Ranges:
    """Code-point ranges (lo, hi), sorted, with overlapping and adjacent ones joined."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def _escape(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _check_not_range_endpoint(pattern: str, close: int, after_hyphen: bool) -> None:
    """`[a-\\p{L}]` and `[\\p{L}-z]` are errors in ECMA-262 (u flag) and meaningless here."""
    after_is_range = pattern[close + 1 : close + 2] == "-" and pattern[close + 2 : close + 3] not in ("]", "")
    if after_hyphen or after_is_range:
        raise ConstraintError(
            f"unsupported regex feature in {pattern!r}: a class range with a Unicode property escape as an endpoint"
        )
