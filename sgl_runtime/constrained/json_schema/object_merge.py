"""Objects constrained in several places (`allOf` members, `$ref` targets, the schema's own keywords)
as ONE object rule of the grammar form.

The conjunction of schemas that say only object keywords (properties, required, additionalProperties,
patternProperties, propertyNames, min/maxProperties, dependentRequired) is again an object of that
kind: a key's value must satisfy, per conjunct, its `properties` entry and matching patterns, or else
its additionalProperties (objects._ObjectSpec over the list of conjuncts). What the conjuncts say
besides that about which keys are present, or about the values of some keys (anyOf/oneOf/not/if/
dependentSchemas over `required` and value tests, presence.py), is checked where the object closes,
as for a single schema. Anything else on the way (`enum`, `const`, unevaluatedProperties,
`$dynamicRef`) leaves the schema to the other rules of grammar_form.py.

Declared keys are written in the order of their first declaration: the schema's own `properties`,
then its `$ref` target's, then each `allOf` member's (depth first); with at most four of them any
order is accepted, as for objects constrained in several places in the one-automaton form.
"""

from __future__ import annotations

from sgl_runtime.constrained.json_schema.presence import presence
from sgl_runtime.constrained.json_schema.shapes import DYNAMIC, OBJECT, OBJECT_KEYWORDS, members
from sgl_runtime.constrained.json_schema.value_tests import ValueTestsRefused
from sgl_runtime.constrained.json_schema.values import FREE_ORDER

NOT_MERGED = object()
_CONDITIONS = ("anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")
_ELSEWHERE = ("enum", "const", "unevaluatedProperties", *DYNAMIC)


class _Elsewhere(Exception):
    pass


def conjuncts(shapes, schema) -> tuple[list, list]:
    """(schemas with object keywords, (schema, its condition keywords) pairs) met through `schema`'s
    own keywords, `$ref` and `allOf`, in declaration order; raises _Elsewhere past them."""
    found: list = []
    conditions: list = []
    seen: set = set()

    def visit(node) -> None:
        if node is True:
            return
        if not isinstance(node, dict) or OBJECT not in shapes.admits(node):
            raise _Elsewhere  # no object at all: the caller's admits() says so
        if id(node) in seen:
            return
        seen.add(id(node))
        if any(k in node for k in _ELSEWHERE):
            raise _Elsewhere
        if any(k in node for k in OBJECT_KEYWORDS):
            found.append(node)
        condition = {k: node[k] for k in _CONDITIONS if k in node}
        if condition:
            conditions.append((node, condition))
        if "$ref" in node:
            visit(shapes.target(node))
        for member in members(node, "allOf"):
            visit(member)

    visit(schema)
    return found, conditions


def merged_object(b, schema: dict):
    """The object rule of `schema`'s objects as one conjunction (None: no valid object), or
    NOT_MERGED when they are constrained by more than object keywords and key conditions."""
    from sgl_runtime.constrained.json_schema.grammar_rules import object_rule

    try:
        found, conditions = conjuncts(b.shapes, schema)
    except _Elsewhere:
        return NOT_MERGED
    if not found:
        return NOT_MERGED
    condition = _condition(b, conditions)
    if condition is NOT_MERGED:
        return NOT_MERGED
    assert condition is None or isinstance(condition, tuple)
    try:
        symbol = object_rule(b, found, condition, mode=max(b.mode, FREE_ORDER))
    except ValueTestsRefused:
        return NOT_MERGED
    if condition is not None and condition[2]:
        b.checks.append("allOf (value tests)")
    return symbol


def _condition(b, conditions: list) -> object:
    """(predicate, keys it reads, value tests) of the condition keywords, None without any."""
    if not conditions:
        return None
    refs = b.comp.refs
    views = []
    for node, keywords in conditions:
        view = b.shapes.keep(dict(keywords))
        refs.base_of[id(view)] = refs.base(node)  # a $ref inside resolves where it was written
        views.append(view)
    whole = b.shapes.keep({"allOf": views})
    keys: set = set()
    tests: dict = {}
    predicate = presence(b.shapes, whole, keys, category=OBJECT, tests=tests)
    return NOT_MERGED if predicate is None else (predicate, keys, tests)
