"""An object's `if` / `then` / `else` as two object alternatives, where value tests cannot carry it.

`if: {"properties": {"runs": {"properties": {"using": {"const": "composite"}}}}}` with `then` /
`else` constraining another key (GitHub Actions' `outputs`) reads inside a container value, which
the value tests of presence.py / value_tests.py do not split. `split_condition(b, schema)` writes the
objects of `schema` as the union of those that pass the `if` (with `then`) and those that fail it
(with `else`): the `if` itself is a conjunct of the first, and `failing(b, if)`, a schema of exactly
the values that fail it, of the second. Where a test's failing values cannot be written without
`not` over objects (a test beyond `properties` / `required` / `type` over a container), nothing is
split. The same split serves an `if` that alone constrains objects too large for one automaton
(OpenAPI 3.1's `{"if": {"type": "object", "required": ["$ref"]}, "then": ..., "else": ...}`). The two
alternatives open alike; the parser follows both (grammar/forking.py) until a value tells them
apart, so the tested key need not be written first.
"""

from __future__ import annotations

from sgl_runtime.constrained.json_schema.object_union import followed_refs, object_union
from sgl_runtime.constrained.json_schema.shapes import ASSERTING

MAX_SPLITS = 4  # conditions one schema's grammar form splits this way (each doubles its object rules)


def split_condition(b, schema: dict):
    """The symbol of `schema`'s objects as the two alternatives above; None where no object is
    valid; False where the `if` cannot be split (the caller refuses as before)."""
    if b.condition_splits >= MAX_SPLITS:
        return False
    for where, rest in _conditions(schema):
        test = where["if"]
        fails = failing(b, test)
        if fails is None:
            continue
        b.condition_splits += 1
        base = b.comp.refs.base(schema)
        b.comp.refs.base_of[id(rest)] = base  # a $ref beside the `if` resolves where it was written
        halves = [{"allOf": [rest, test, where.get("then", True)]}, {"allOf": [rest, fails, where.get("else", True)]}]
        for half in halves:
            b.shapes.keep(half)  # alive while the compile's caches key on it (and on what it holds)
            b.comp.refs.base_of[id(half)] = base
        return object_union(b, "anyOf", halves)
    return False


def _conditions(schema: dict):
    """(the subschema holding an `if`, `schema` without it): `schema` itself, then each allOf member
    with an `if` of its own."""
    if "if" in schema:
        yield schema, {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
    members = schema.get("allOf")
    for i, member in enumerate(members if isinstance(members, list) else ()):
        if isinstance(member, dict) and "if" in member:
            others = [*members[:i], *members[i + 1 :]]
            yield member, {**{k: v for k, v in schema.items() if k != "allOf"}, **({"allOf": others} if others else {})}


def failing(b, test):
    """A schema admitting exactly the values that fail `test` (False: none do), or None where that
    needs a `not` over a container test."""
    test = followed_refs(b, test)
    if test is True or test == {}:
        return False
    if test is False:
        return True
    if not isinstance(test, dict):
        return None
    words = set(test) & ASSERTING  # the rest are annotations
    structural = words & {"properties", "required"}
    if not structural:
        if words & {"allOf", "anyOf", "oneOf", "not", "if", "$ref", "items", "prefixItems", "contains"}:
            return None
        return {"not": test}  # exact; the grammar form complements leaves (const, enum, pattern, ...), not rules
    if words - {"properties", "required", "type"}:
        return None
    props, required = test.get("properties", {}), test.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        return None
    ways = [{"not": {"type": test["type"]}}] if "type" in test else []
    ways += [{"type": "object", "properties": {k: False}} for k in required]
    for key, sub in props.items():
        fails = failing(b, sub)
        if fails is None:
            return None
        if fails is not False:
            ways.append({"type": "object", "required": [key], "properties": {key: fails}})
    return False if not ways else ways[0] if len(ways) == 1 else {"anyOf": ways}
