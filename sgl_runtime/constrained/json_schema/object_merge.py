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

An `anyOf`/`oneOf` over objects among those places, or if/then/else conditions that all test one key's
string value (a discriminator: `allOf: [{"if": {"properties": {"Type": {"const": "Choice"}}}, "then":
{"$ref": ...}}, ...]`), split the object into alternatives, one object rule each (oneOf needs its
alternatives to exclude each other by their keys, as in object_union.py), and the grammar is then
checked as for object alternatives.

Declared keys are written in the order of their first declaration: the schema's own `properties`,
then its `$ref` target's, then each `allOf` member's (depth first), then an alternative's; a key
whose value tells if/then cases apart comes first.
"""

from __future__ import annotations

from sgl_runtime.constrained.json_schema.presence import presence
from sgl_runtime.constrained.json_schema.shapes import ASSERTING, DYNAMIC, OBJECT, OBJECT_KEYWORDS, literals, members
from sgl_runtime.constrained.json_schema.value_tests import ValueTestsRefused

NOT_MERGED = object()
MAX_ALTERNATIVES = 32  # object rules one schema may distribute into (allOf over anyOf/oneOf branches)
_CONDITIONS = ("anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")
_ELSEWHERE = ("enum", "const", "unevaluatedProperties", *DYNAMIC)


class _Elsewhere(Exception):
    pass


def conjuncts(shapes, schema) -> tuple[list, list]:
    """(schemas with object keywords, (schema, its condition keywords) pairs) met through `schema`'s
    own keywords, `$ref` and `allOf`, in declaration order; raises _Elsewhere past them. An
    unevaluatedProperties among them is one more conjunct where it can be (static_unevaluated)."""
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
        if any(k in node for k in _ELSEWHERE if k != "unevaluatedProperties"):
            raise _Elsewhere
        if "unevaluatedProperties" in node and node is not schema:  # its own keys: a conjunction of its own
            more, more_conditions = conjuncts(shapes, node)
            found.extend(m for m in more if all(m is not f for f in found))
            conditions.extend(more_conditions)
            return
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
    if isinstance(schema, dict) and "unevaluatedProperties" in schema:
        found += static_unevaluated(shapes, schema, found, conditions)
    return found, conditions


_ANNOTATING = ("properties", "patternProperties", "additionalProperties", "unevaluatedProperties")


def static_unevaluated(shapes, schema: dict, found: list, conditions: list) -> list:
    """`schema`'s unevaluatedProperties as one more conjunct, where the keys it applies to do not
    depend on which branches an object satisfies: its own keywords, `$ref` and `allOf` members
    (`found`) say which keys they evaluate, and its conditions evaluate none (they only ask which
    keys are present, as `anyOf: [{"required": ["paths"]}, ...]` in the OpenAPI 3.1 schema). Then the
    unevaluated keys are those no `properties` entry names and no patternProperties matches, and
    none is where a conjunct has additionalProperties. Raises _Elsewhere otherwise."""
    if any(_annotates(shapes, sub, 0) for _, keywords in conditions for sub in _subschemas(keywords)):
        raise _Elsewhere
    if any("additionalProperties" in s for s in found):
        return []  # every key is evaluated
    names = {k: True for s in found if isinstance(s.get("properties"), dict) for k in s["properties"]}
    patterns = {p: True for s in found if isinstance(s.get("patternProperties"), dict) for p in s["patternProperties"]}
    rest = shapes.keep({"properties": names, "patternProperties": patterns})
    rest["additionalProperties"] = schema["unevaluatedProperties"]
    shapes.refs.base_of[id(rest)] = shapes.refs.base(schema)  # a $ref in it resolves where it was written
    return [rest]


def _subschemas(keywords: dict) -> list:
    out: list = []
    for keyword, value in keywords.items():
        if keyword in ("allOf", "anyOf", "oneOf"):
            out += value if isinstance(value, list) else [value]
        elif keyword == "dependentSchemas":
            out += list(value.values()) if isinstance(value, dict) else [value]
        else:
            out.append(value)
    return out


def _annotates(shapes, schema, depth: int) -> bool:
    """Whether `schema` may evaluate some key of an object (True when unsure)."""
    if isinstance(schema, bool):
        return False
    if not isinstance(schema, dict) or depth > 32 or any(k in schema for k in (*_ANNOTATING, *DYNAMIC)):
        return True
    subs = _subschemas({k: schema[k] for k in _CONDITIONS if k in schema})
    subs += [shapes.target(schema)] if "$ref" in schema else []
    subs += members(schema, "allOf")
    return any(_annotates(shapes, sub, depth + 1) for sub in subs)


def merged_object(b, schema: dict):
    """The object rule of `schema`'s objects as one conjunction (None: no valid object), or
    NOT_MERGED when they are constrained by more than object keywords and key conditions."""
    try:
        found, conditions = conjuncts(b.shapes, schema)
    except _Elsewhere:
        return NOT_MERGED
    if not found and not conditions:
        return NOT_MERGED
    return _merged(b, found or [b.shapes.keep({})], conditions, [MAX_ALTERNATIVES])


def _merged(b, found: list, conditions: list, budget: list):
    if b.distribute_first:
        symbol = _distributed(b, found, conditions, budget)
        return symbol if symbol is not NOT_MERGED else _conjunction(b, found, conditions)
    symbol = _conjunction(b, found, conditions)
    return symbol if symbol is not NOT_MERGED else _distributed(b, found, conditions, budget)


def _conjunction(b, found: list, conditions: list):
    from sgl_runtime.constrained.json_schema.grammar_rules import object_rule

    condition = _condition(b, conditions)
    if condition is NOT_MERGED:
        return NOT_MERGED
    assert condition is None or isinstance(condition, tuple)
    try:
        symbol = object_rule(b, found, condition)
    except ValueTestsRefused:
        return NOT_MERGED
    if condition is not None and condition[2]:
        b.checks.append("allOf (value tests)")
        b.value_tests_used += 1
    return symbol


def _distributed(b, found: list, conditions: list, budget: list):
    """allOf(X, anyOf/oneOf[B1..Bn]) as the alternatives allOf(X, Bi), one object rule each, where
    the conditions' first anyOf/oneOf over objects is what the conjunction could not say. oneOf
    needs its alternatives to exclude each other by their keys (object_union.exclusive), as for
    object alternatives on their own; the grammar is then checked like theirs."""
    from sgl_runtime.constrained.json_schema.object_union import exclusive

    cases = _cases_by_value(b, found, conditions)
    if cases is not None:
        return _union(b, found, cases, budget, "if", lead=True)
    for index, (node, keywords) in enumerate(conditions):
        parts = [k for k in ("anyOf", "oneOf") if k in keywords]
        if len(parts) != 1:
            continue
        part = parts[0]
        branches = [x for x in members(node, part) if OBJECT in b.shapes.admits(x)]
        if part == "oneOf" and not exclusive(b, branches, tuple(found)):
            return NOT_MERGED
        others = {k: v for k, v in keywords.items() if k != part}
        rest = conditions[:index] + ([(node, others)] if others else []) + conditions[index + 1 :]
        return _union(b, found, [([branch], rest) for branch in branches], budget, part)
    return NOT_MERGED


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


def _only(schema: dict, keywords: tuple) -> bool:
    """Whether `schema` says nothing but `keywords` (and annotations)."""
    return all(k in keywords or k not in ASSERTING for k in schema)


# the cases besides the tested values (key absent, another value), and a test of the key's presence alone
_ABSENT, _OTHER, _PRESENT = object(), object(), object()


def _tested_key(schema):
    """(key, strings, holds when absent) when `schema` (an `if`) holds exactly when that key has one
    of those string values, or is absent if so marked: {"properties": {K: {"const"/"enum": ...}}}
    (with "required": [K]: not when absent), or anyOf/oneOf of those and {"not": {"required": [K]}};
    {"required": [K]} holds for every value of K (strings: _PRESENT)."""
    if not isinstance(schema, dict):
        return None
    for part in ("anyOf", "oneOf"):
        if part in schema and _only(schema, (part,)) and isinstance(schema[part], list):
            tests = [_tested_key(s) for s in schema[part]]
            keys = {t[0] for t in tests if t is not None}
            if None in tests or len(keys) != 1 or any(t[1] is _PRESENT for t in tests):  # type: ignore[index]
                return None
            values = [v for t in tests for v in t[1]]
            absent = [t[2] for t in tests]
            if part == "oneOf" and (len(set(values)) < len(values) or sum(absent) > 1):
                return None  # overlapping alternatives: oneOf would reject where both hold
            return keys.pop(), list(dict.fromkeys(values)), any(absent)
    if set(schema) == {"not"} and isinstance(schema["not"], dict) and set(schema["not"]) == {"required"}:
        required = schema["not"]["required"]
        return (required[0], [], True) if isinstance(required, list) and len(required) == 1 else None
    props = schema.get("properties")
    if not _only(schema, ("properties", "required", "type")) or schema.get("type", "object") != "object":
        return None
    required = schema.get("required", [])
    if props is None and isinstance(required, list) and len(required) == 1 and isinstance(required[0], str):
        return required[0], _PRESENT, False  # {"required": [K]}: holds whatever K's value
    if not isinstance(props, dict) or len(props) != 1:
        return None
    ((key, test),) = props.items()
    values = literals(test) if isinstance(test, dict) and set(test) <= {"const", "enum"} else None
    if not values or not all(isinstance(v, str) for v in values):
        return None
    if required not in ([], [key]):
        return None
    return key, list(dict.fromkeys(values)), not required


def _cases_by_value(b, found: list, conditions: list):
    """if/then/else conditions that all test one key's string value (a discriminator written as
    `allOf: [{"if": {..."Type": {"const": "Choice"}...}, "then": {"$ref": ...}}, ...]`), as one
    case per tested value, one for the other values and one for the key's absence:
    [(extra schemas, conditions left)]. Conditions that ask only which keys are present (`if:
    {"required": [...]}`) may stand beside them: they are left to each case."""
    tested, on_keys = [], set()
    for index, (node, keywords) in enumerate(conditions):
        if "if" in keywords:
            test = keywords["if"]
            found_key = _tested_key(b.shapes.target(test) if _is_ref(test) else test)
            if found_key is not None:
                tested.append((index, found_key))
            elif _asks_keys(b, node, keywords):
                on_keys.add(index)  # stays a condition, checked where each case's object closes
            else:
                return None
    if len({key for _, (key, _, _) in tested}) > 1:  # a key's presence beside values: a condition
        moved = {i for i, (_, values, _) in tested if values is _PRESENT and _asks_keys(b, *conditions[i])}
        on_keys |= moved
        tested = [t for t in tested if t[0] not in moved]
    if not tested or len({key for _, (key, _, _) in tested}) != 1:
        return None
    key = tested[0][1][0]
    rest = [
        (n, {k: v for k, v in kw.items() if i in on_keys or k not in ("if", "then", "else")})
        for i, (n, kw) in enumerate(conditions)
    ]
    rest = [(n, kw) for n, kw in rest if kw]
    every = list(dict.fromkeys(v for _, (_, values, _) in tested if values is not _PRESENT for v in values))
    required = any(key in (c.get("required") or []) for c in found)
    cases = []
    for value in [*every, _OTHER] + ([] if required else [_ABSENT]):
        if value is _ABSENT:
            test = b.shapes.keep({"not": {"required": [key]}})
        elif value is _OTHER:
            other = {"properties": {key: {"not": {"enum": every}}}} if every else {}
            test = b.shapes.keep({**other, "required": [key]})
        else:
            test = b.shapes.keep({"properties": {key: {"const": value}}, "required": [key]})
        extra = [test]
        for index, (_, values, absent) in tested:
            holds = absent if value is _ABSENT else values is _PRESENT or value in values
            branch = conditions[index][1].get("then" if holds else "else")
            if branch is not None:
                extra.append(branch)
        cases.append((extra, rest))
    return cases


def _asks_keys(b, node, keywords: dict) -> bool:
    """Whether the if/then/else of `keywords` only ask which keys an object has (presence.py)."""
    view = b.shapes.keep({k: keywords[k] for k in ("if", "then", "else") if k in keywords})
    b.comp.refs.base_of[id(view)] = b.comp.refs.base(node)
    return presence(b.shapes, view, set(), category=OBJECT) is not None


def _is_ref(schema) -> bool:
    return isinstance(schema, dict) and set(schema) == {"$ref"}


def _union(b, found: list, cases: list, budget: list, part: str, lead: bool = False):
    """One object rule per case (extra schemas beside `found`, the conditions left) and a rule
    choosing between them; NOT_MERGED where a case cannot be merged. lead: the first extra schema
    (the tested key's value) comes first, so the key is written first and its value token tells
    the cases apart from the start."""
    from sgl_runtime.constrained.json_schema.object_union import choice

    budget[0] -= len(cases)
    if budget[0] < 0:
        return NOT_MERGED
    symbols: list = []
    for extra, rest in cases:
        more: list = []
        more_conditions: list = []
        for schema in extra:
            try:
                f, c = conjuncts(b.shapes, schema)
            except _Elsewhere:
                if schema is False or (isinstance(schema, dict) and OBJECT not in b.shapes.admits(schema)):
                    break  # this case admits no object
                return NOT_MERGED
            more += f
            more_conditions += c
        else:
            first = more[:1] if lead and more[:1] and more[0] is extra[0] else []
            known = {id(m) for m in first + found}  # by identity: equal schemas under other base URIs differ
            merged = first + found + [m for m in more if id(m) not in known]
            symbol = _merged(b, merged, rest + more_conditions, budget)
            if symbol is NOT_MERGED:
                return NOT_MERGED
            symbols.append(symbol)
    return choice(b, part, symbols)
