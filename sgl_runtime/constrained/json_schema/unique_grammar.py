"""uniqueItems in the grammar form, for compact JSON.

The array's rule carries three marked rules (`GrammarEngine`, `unique_rules`): an empty one right
after `[` (a new array), one around each item (an item ends), and the array's own (it closes).
The engine keeps the text of every item of each open array and rejects an item that repeats an
earlier one; masks also leave out the tokens after which the item can only end as a repeat.
Where every value the items admit has one spelling in this serialisation (`one_spelling`:
declared keys in `properties` order, no undeclared keys, numbers as numbers.py spells them),
equal text is equal value and items are compared as text (OPEN). Otherwise (objects whose keys
may come in other orders: free-form values, patternProperties, key_order "any") they are compared
as JSON values (OPEN_VALUES, grammar/unique_values.py), which needs each scalar to have one
spelling: compact whitespace, no `integral_floats`. Items of `prefixItems` count like the others.
Elsewhere the keyword is refused (or, with lenient=True, not enforced).
"""

from __future__ import annotations

from typing import Optional

from sgl_runtime.constrained.grammar.engine import CLOSE, ITEM, OPEN, OPEN_VALUES
from sgl_runtime.constrained.json_schema import numbers
from sgl_runtime.constrained.json_schema.shapes import OBJECT
from sgl_runtime.constrained.json_schema.values import FREE_ORDER, NORMAL

MAX_VISITS = 4096  # subschemas one check reads
MAX_WALK = 200_000  # schema objects track_keys reads


def unique_items(b, schemas: list) -> Optional[str]:
    """How uniqueness of items of `schemas` (those of prefixItems, then `items`) is enforced: OPEN
    (by text), OPEN_VALUES (by JSON value), or None (refused, or ignored if lenient)."""
    if b.tokens.ws is None and b.mode in (NORMAL, FREE_ORDER) and not numbers.integral_floats_allowed():
        return OPEN if b.mode == NORMAL and all(one_spelling(b, s) for s in schemas) else OPEN_VALUES
    b.comp.unsupported(
        "uniqueItems",
        "exact in the grammar form for compact JSON (whitespace 'compact') without integral_floats",
    )
    return None


def track_keys(b, schema) -> bool:
    """Whether the objects of `schema`'s grammar must reject a key written twice (each object then
    tracks its keys: grammar_rules.key_rules): where undeclared keys count towards minProperties
    (`{"a":1,"a":2}` has one property), and where items compared as JSON values may be objects
    (unique_values counts an object's members). Found by a walk over the schema document."""
    todo, seen = [schema], set()
    while todo and len(seen) < MAX_WALK:
        node = todo.pop()
        if isinstance(node, list):
            todo += node
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        minimum = node.get("minProperties")
        if isinstance(minimum, (int, float)) and not isinstance(minimum, bool) and minimum >= 2:
            return True
        if node.get("uniqueItems") is True and b.tokens.ws is None:
            prefix = node.get("prefixItems", [])
            items = [*prefix, node.get("items", True)] if isinstance(prefix, list) else [node.get("items", True)]
            if b.mode not in (NORMAL, FREE_ORDER) or not all(one_spelling(b, s) for s in items):
                return True
        todo += [v for v in node.values() if isinstance(v, (dict, list))]
    return len(seen) >= MAX_WALK  # a schema too large to walk: track


def mark_tracked(b, kind, array_rule: str, opener: str, item_rules: list) -> None:
    """Record the marked rules of one array whose items the engine tracks (see the module
    docstring); `kind`: OPEN, OPEN_VALUES or a grammar.frames.Opener (a bound on the count)."""
    b.unique[opener], b.unique[array_rule] = kind, CLOSE
    for item_rule in item_rules:
        b.unique[item_rule] = ITEM


def one_spelling(b, schema) -> bool:
    """Whether every value `schema` admits has one spelling (conservative: False when unsure).
    A schema's language lies inside that of each of its conjuncts (`$ref`, an `allOf` member,
    `enum`/`const`), so one conjunct with one spelling suffices; `anyOf`/`oneOf` need every
    branch, with at most one admitting objects (two could order the same keys differently)."""
    memo: dict = {}
    return _one(b, schema, memo, [MAX_VISITS])


def _one(b, schema, memo: dict, budget: list) -> bool:
    if schema is False:
        return True
    if not isinstance(schema, dict):
        return False  # true: any value, objects with any keys in any order
    key = id(schema)
    if key in memo:
        return memo[key]
    budget[0] -= 1
    if budget[0] < 0:
        return False
    memo[key] = True  # a recursive reference: decided by the rest of the structure
    memo[key] = found = _decide(b, schema, memo, budget)
    return found


def _decide(b, schema: dict, memo: dict, budget: list) -> bool:
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list) and not any(_holds_float(v) for v in values):
        return True  # literal values, spelled as written
    if "$ref" in schema and _one(b, b.shapes.target(schema), memo, budget):
        return True
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and any(_one(b, s, memo, budget) for s in all_of):
        return True
    for word in ("anyOf", "oneOf"):
        branches = schema.get(word)
        if isinstance(branches, list) and branches:
            objects = sum(OBJECT in b.shapes.admits(s) for s in branches)
            if objects <= 1 and all(_one(b, s, memo, budget) for s in branches):
                return True
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types
    if not isinstance(types, list) or not types:
        return False  # its own keywords admit every type, objects with any keys among them
    if "array" in types:
        items = schema.get("items", True)
        prefix = schema.get("prefixItems", [])
        if isinstance(items, list):  # draft-04 to 2019-09 tuples
            prefix, items = items, schema.get("additionalItems", True)
        if not isinstance(prefix, list) or not all(_one(b, s, memo, budget) for s in [*prefix, items]):
            return False
    if "object" in types:
        props = schema.get("properties", {})
        if (
            schema.get("additionalProperties") is not False
            or schema.get("patternProperties")
            or not isinstance(props, dict)
        ):
            return False
        if not all(_one(b, s, memo, budget) for s in props.values()):
            return False
    return True


def _holds_float(value) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_float(v) for v in value)
    return False
