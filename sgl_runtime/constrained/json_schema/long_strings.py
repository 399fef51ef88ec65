"""Strings with a long length bound in the grammar form: one counted terminal, not one automaton
state per character.

A flat string automaton of `maxLength: 2048` has thousands of states per position kind (the
character, its escapes, its UTF-8 bytes) and takes seconds to build; most real-world schemas
(CloudFormation: 256 to 2048 characters) have several. Here such a string is a `CountedDFA`
(counted.py): the small automaton of the string literal without its bounds (pattern and format
included, every escape spelled), whose character-completing transitions count, with minLength
and maxLength as count bounds. A pattern that is only a counted class, `^.{0,2048}$`, is such a
bound too, and so is a string whose pattern alone makes a large automaton (there a flat string
would leave out the rare control-character escapes). Short bounds count too (past COUNTED_ABOVE
characters): a flat `maxLength: 16` is cheap to build but has a state per position, and each
position's first mask walks the vocabulary. The lexer builds the (state, count) states
as generation reaches them. Scalars of other types beside the string (`"type": ["string",
"null"]`) stay a flat leaf, an alternative that the string's opening quote keeps apart.
"""

from __future__ import annotations

import re

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.formats import format_content
from sgl_runtime.constrained.json_schema.shapes import (
    ARRAY_KEYWORDS,
    COMPLEMENTS,
    DYNAMIC,
    NUMBER_KEYWORDS,
    OBJECT_KEYWORDS,
    SCALAR,
    SCALAR_KEYWORDS,
    STRING_KEYWORDS,
)
from sgl_runtime.constrained.json_schema.strings import FULL_ESCAPES_UP_TO, counted_string, pattern_content
from sgl_runtime.constrained.json_schema.values import EXACT, count_keyword

# a length bound past this many characters makes a counted terminal: its masks are shared by the counts
# that no token tells apart, where a flat string has a state per position, each a walk of the vocabulary
COUNTED_ABOVE = 8
NOT_COUNTED = object()
_PLAIN = frozenset(("type", "allOf", *STRING_KEYWORDS, *NUMBER_KEYWORDS))
_CONTAINER = frozenset(
    (
        *("properties", "required", "additionalProperties", "patternProperties", "propertyNames"),
        *("minProperties", "maxProperties", "dependentRequired", "items", "minItems", "maxItems", "uniqueItems"),
    )
)
_NOT_RULES = (
    frozenset((*OBJECT_KEYWORDS, *ARRAY_KEYWORDS, *COMPLEMENTS, *DYNAMIC, "allOf", "anyOf", "oneOf", "enum", "const"))
    | {"then", "else"}
) - _CONTAINER
# ^X{m,n}$ with X one character class: X* with the length bounds [m, n]
_COUNTED_CLASS = re.compile(r"\^(\.|\\[dDwWsS]|\[(?:\\.|[^\]\\])+\])\{(\d+)(,(\d*))?\}\$")


def counted_leaf(b, schema, cats: frozenset):
    """The symbol of `schema`'s values (restricted to `cats`) when they are all scalars and their
    strings have a long length bound (None: no value); NOT_COUNTED when the flat leaf applies."""
    found = _long_string(b, schema, cats)
    if found is None:
        return NOT_COUNTED
    plain, strings, key = _counted(b, *found)
    symbols = [] if strings.is_empty() else [b.terminal(strings, key)]
    others = [t for t in plain["type"] if t != "string"]
    if others:
        other = b.leaf(b.shapes.keep({**plain, "type": others}), frozenset({SCALAR}))
        if other is not None:
            symbols.append(other)
    if len(symbols) <= 1:
        return symbols[0] if symbols else None
    return b.rule([[s] for s in symbols])


def _counted(b, plain: dict, lo: int, hi, pattern):
    """(plain, CountedDFA, terminal key) of a long string schema found by `_long_string`."""
    fmt = plain.get("format")
    content = format_content(fmt) if isinstance(fmt, str) and b.mode != EXACT else None
    strings = counted_string(lo, hi, (pattern,) if pattern is not None else (), (content,) if content else ())
    return plain, strings, ("counted", lo, hi, pattern, content)


def has_long_strings(schema, above: "int | None" = None) -> bool:
    """Whether a length bound past `above` (default COUNTED_ABOVE; a keyword or a counted pattern)
    appears anywhere in the schema document."""
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if _bounds(node, above) is not None:
                return True
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return False


def holds_long_string(b, schema, depth: int = 0) -> bool:
    """Whether `schema` is an object or array with only keywords the grammar form's rules take
    (`_CONTAINER`: the object keywords, and items, minItems, maxItems,
    uniqueItems) and a long string sits in it: its rules then
    keep that string counted, not one flat automaton."""
    if not isinstance(schema, dict) or depth > 8 or set(schema) & _NOT_RULES:
        return False
    if "$ref" in schema:
        target = b.shapes.target(schema)
        return not set(schema) & _CONTAINER and holds_long_string(b, target, depth + 1)
    properties = schema.get("properties", {})
    subs = list(properties.values()) if isinstance(properties, dict) else []
    patterns = schema.get("patternProperties", {})
    subs += list(patterns.values()) if isinstance(patterns, dict) else []
    subs += [schema[k] for k in ("additionalProperties", "items") if k in schema]
    for sub in subs:
        found = _long_string(b, sub, frozenset({SCALAR}))
        if found is not None or holds_long_string(b, sub, depth + 1):
            return True
    return False


def _long_string(b, schema, cats: frozenset):
    """(plain schema, lo, hi, pattern) when `schema`'s values are scalars and its strings have a
    length bound past COUNTED_ABOVE (`_plain`, `_bounds`); else None."""
    if not isinstance(schema, dict) or b.shapes.admits(schema) & cats != {SCALAR}:
        return None
    plain = _plain(b.shapes.scalars(schema))
    if plain is None or "string" not in plain["type"]:
        return None
    bounds = _bounds(plain)
    if bounds is None and isinstance(plain.get("pattern"), str):
        bounds = _large_pattern(plain)
    return None if bounds is None else (plain, *bounds)


def _large_pattern(plain: dict):
    """(lo, hi, pattern) when the pattern's automaton is large enough that a flat string of it would
    leave out the rare control-character escapes (strings.FULL_ESCAPES_UP_TO); None otherwise."""
    try:
        lo, hi = count_keyword(plain, "minLength", 0), count_keyword(plain, "maxLength", None)
        large = pattern_content(plain["pattern"]).num_states > FULL_ESCAPES_UP_TO
    except ConstraintError:  # the flat compiler names the problem
        return None
    return (lo, hi, plain["pattern"]) if large else None


def _bounds(schema: dict, above: "int | None" = None):
    """(lo, hi, pattern) of a string schema whose length bounds (minLength, maxLength, a pattern
    `^X{m,n}$`, rewritten `^X*$`) pass `above` (default COUNTED_ABOVE); None otherwise."""
    above = COUNTED_ABOVE if above is None else above
    pattern = schema.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        return None
    try:
        lo, hi = count_keyword(schema, "minLength", 0), count_keyword(schema, "maxLength", None)
    except ConstraintError:  # the flat compiler names the bad keyword
        return None
    counted = _COUNTED_CLASS.fullmatch(pattern) if pattern is not None else None
    if counted is not None:
        cls, m, comma, n = counted.group(1), int(counted.group(2)), counted.group(3), counted.group(4)
        top = m if comma is None else (int(n) if n else None)
        lo, hi = max(lo, m), top if hi is None else (hi if top is None else min(hi, top))
        pattern = f"^{cls}*$"
    if lo > above or (hi is not None and hi > above):
        return lo, hi, pattern
    return None


def _plain(schema):
    """`schema` (from Shapes.scalars) as types plus scalar keywords, with a lone `allOf` member (an
    inlined `$ref`) merged in; None when it says more (enum, anyOf, not, several members)."""
    if not isinstance(schema, dict) or set(schema) - _PLAIN:
        return None
    if "allOf" not in schema:
        return schema
    if len(schema["allOf"]) != 1 or any(k in schema for k in SCALAR_KEYWORDS):
        return None
    inner = _plain(schema["allOf"][0])
    if inner is None:
        return None
    return {**inner, "type": [t for t in inner["type"] if t in schema["type"]]}
