"""Subschemas that, on objects, only ask which keys are present (`{"required": ["a"]}`, `oneOf` of
those, `not`, `if`/`then`/`else`, `dependentRequired`, `dependentSchemas` of those): the grammar
form checks them at the end of an object from the set of keys seen, so `properties` beside
`oneOf: [{"required": ["a"]}, {"required": ["b"]}]` needs no intersection of rules.

With `tests` (a dict), `properties` there may also ask what a key's value is
(`if: {"properties": {"plan": {"const": "team"}}}`): each such (key, subschema) is a *value test*,
recorded in `tests` as fact -> (key, subschema); the set the predicate reads then holds, besides
the present keys, the facts whose value test the key's value passes (the grammar form splits that
key's values into the ones that pass and the ones that fail, grammar_rules.object_rule)."""

from __future__ import annotations

from typing import Callable, Optional

from sgl_runtime.constrained.json_schema.shapes import (
    ARRAY_KEYWORDS,
    COMPLEMENTS,
    DYNAMIC,
    OBJECT,
    OBJECT_KEYWORDS,
    members,
    types_of,
)

Predicate = Callable[[frozenset], bool]
_CONSTRAINING = {  # on objects (array and scalar keywords say nothing of them; on arrays, array keywords do)
    *OBJECT_KEYWORDS,
    *COMPLEMENTS,
    *DYNAMIC,
    "type",
    "enum",
    "const",
    "allOf",
    "anyOf",
    "oneOf",
    "then",
    "else",
    "$ref",
}
_PRESENCE_KEYWORDS = {"type", "required", "dependentRequired", "allOf", "anyOf", "oneOf", "not", "if", "then", "else"}
_PRESENCE_KEYWORDS |= {"$ref", "dependentSchemas"}


def presence(
    shapes,
    schema,
    keys: set,
    visiting: Optional[set] = None,
    category: str = "object",
    tests: Optional[dict] = None,
) -> Optional[Predicate]:
    """A predicate over the set of present keys equal to `schema` on objects, or None when `schema`
    asks more of an object than which keys it has. Adds the keys it reads to `keys`. With
    category="array" the same schemas on arrays: a constant (`required` holds of any array).
    tests: see the module docstring (None: `properties` is not read)."""
    if isinstance(schema, bool):
        return (lambda _p: True) if schema else (lambda _p: False)
    if not isinstance(schema, dict):
        return None
    visiting = set() if visiting is None else visiting
    constraining = _CONSTRAINING if category == "object" else _CONSTRAINING | set(ARRAY_KEYWORDS)
    allowed = _PRESENCE_KEYWORDS | ({"properties"} if tests is not None and category == "object" else set())
    if id(schema) in visiting or any(k in constraining and k not in allowed for k in schema):
        return None
    if category not in types_of(schema):
        return lambda _p: False
    on_objects = category == "object"
    visiting = visiting | {id(schema)}
    parts: list[Predicate] = []
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        return None
    if required and on_objects:
        needed = frozenset(required)
        keys.update(needed)
        parts.append(lambda p, needed=needed: needed <= p)
    props = schema.get("properties", {}) if on_objects else {}
    if not isinstance(props, dict):
        return None
    for key, sub in props.items():
        keys.add(key)
        if sub is False:
            parts.append(lambda p, key=key: key not in p)
        elif sub is not True and sub != {}:
            fact = ("value", key, id(sub))
            tests[fact] = (key, sub)  # type: ignore[index]
            parts.append(lambda p, key=key, fact=fact: key not in p or fact in p)
    deps = schema.get("dependentRequired", {})
    if not isinstance(deps, dict) or not all(isinstance(v, list) for v in deps.values()):
        return None
    for key, needed_list in deps.items() if on_objects else ():
        needed = frozenset(needed_list)
        keys.update({key, *needed})
        parts.append(lambda p, key=key, needed=needed: key not in p or needed <= p)
    subs = {kw: members(schema, kw) for kw in ("allOf", "anyOf", "oneOf") if kw in schema}
    if "$ref" in schema:
        subs.setdefault("allOf", [])
        subs["allOf"] = [*subs["allOf"], shapes.target(schema)]
    for keyword, schemas in subs.items():
        preds = [presence(shapes, s, keys, visiting, category, tests) for s in schemas]
        if any(p is None for p in preds):
            return None
        parts.append(_combine(keyword, preds))  # type: ignore[arg-type]
    for keyword in ("not", "if", "then", "else"):
        if keyword in schema and presence(shapes, schema[keyword], keys, visiting, category, tests) is None:
            return None
    if "not" in schema:
        inner = presence(shapes, schema["not"], keys, visiting, category, tests)
        parts.append(lambda p, inner=inner: not inner(p))  # type: ignore[misc]
    if "if" in schema:
        cond, then, other = (
            presence(shapes, schema.get(k, True), keys, visiting, category, tests) for k in ("if", "then", "else")
        )
        parts.append(lambda p, c=cond, t=then, o=other: t(p) if c(p) else o(p))  # type: ignore[misc]
    dependent = schema.get("dependentSchemas", {})
    if not isinstance(dependent, dict):
        return None
    for key, sub in dependent.items():
        inner = presence(shapes, sub, keys, visiting, category, tests)
        if inner is None:
            return None
        if not on_objects:
            continue
        keys.add(key)
        parts.append(lambda p, key=key, inner=inner: key not in p or inner(p))
    return lambda p: all(part(p) for part in parts)


def _combine(keyword: str, preds: list[Predicate]) -> Predicate:
    if keyword == "allOf":
        return lambda p: all(f(p) for f in preds)
    if keyword == "anyOf":
        return lambda p: any(f(p) for f in preds)
    return lambda p: sum(f(p) for f in preds) == 1


_APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")


def presence_condition(b, schema: dict, applicators: list, c: str = OBJECT):
    """(predicate over the present keys and value facts, keys it reads, value tests) when the
    in-place applicators of `schema` (GrammarBuilder `b`'s subschema) only ask which keys an object
    has and, on objects, what values of its keys pass which subschemas, else None."""
    if not applicators or any(p not in (*_APPLICATORS, "$ref") for p in applicators):
        return None
    view = b.shapes.keep({k: schema[k] for k in (*_APPLICATORS, "$ref") if k in schema})
    b.comp.refs.base_of[id(view)] = b.comp.refs.base(schema)  # its $ref resolves where schema's does
    keys: set = set()
    tests: dict = {}
    predicate = presence(b.shapes, view, keys, category=c, tests=tests if c == OBJECT else None)
    return None if predicate is None else (predicate, keys, tests)
