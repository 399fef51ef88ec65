"""Arrays constrained in several places (`allOf` members, `$ref` targets, the schema's own keywords)
as ONE array rule of the grammar form, the arrays' counterpart of object_merge.py.

The conjunction of schemas that say only `items`, `prefixItems` (in one of them), `minItems`,
`maxItems` and `uniqueItems` (an anyOf/oneOf of one member being that member) is again such an array: each item satisfies every conjunct's schema
for its position (its `prefixItems` entry, else its `items`), the count the tightest bounds, and
items are unique if one conjunct says so. CloudFormation's

    {"allOf": [{"$ref": "#/definitions/AttributeDefinitions"}, {"minItems": 2}]}

(a `then` that tightens a property's array) is one array rule; anything else on the way
(`contains`, enum, conditions) leaves the schema to the other rules of grammar_form.py.
"""

from __future__ import annotations

from sgl_runtime.constrained.json_schema.object_merge import NOT_MERGED
from sgl_runtime.constrained.json_schema.shapes import ARRAY, ASSERTING, SILENT_ON, members
from sgl_runtime.constrained.json_schema.values import count_keyword

_MERGED = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")
_SILENT = SILENT_ON[ARRAY] | {"type"}  # says nothing more of an array (`type` as admits() reads it)


def merged_array(b, schema: dict):
    """The array rule of `schema`'s arrays as one conjunction (None: no valid array), or
    NOT_MERGED when they are constrained by more than the keywords above."""
    from sgl_runtime.constrained.json_schema.grammar_rules import array_rule

    found: list = []
    seen: set = set()

    def visit(node) -> bool:
        if node is True or id(node) in seen:
            return True
        if not isinstance(node, dict) or ARRAY not in b.shapes.admits(node):
            return False
        seen.add(id(node))
        single = [k for k in ("anyOf", "oneOf") if k in node and len(members(node, k)) == 1]  # as allOf
        if any(k in ASSERTING and k not in (*_MERGED, *_SILENT, "$ref", "allOf", *single) for k in node):
            return False
        found.append(node)
        targets = [b.shapes.target(node)] if "$ref" in node else []
        subs = [*targets, *members(node, "allOf"), *(member for k in single for member in members(node, k))]
        return all(visit(sub) for sub in subs)

    if not visit(schema):
        return NOT_MERGED
    prefixed = [s for s in found if "prefixItems" in s]
    if len(prefixed) > 1 or not all(isinstance(s["prefixItems"], list) for s in prefixed):
        return NOT_MERGED
    items = [s["items"] for s in found if "items" in s]
    merged: dict = {"minItems": max(count_keyword(s, "minItems", 0) for s in found)}
    highs = [count_keyword(s, "maxItems", None) for s in found]
    if any(high is not None for high in highs):
        merged["maxItems"] = min(high for high in highs if high is not None)
    if any(s.get("uniqueItems") is True for s in found):
        merged["uniqueItems"] = True
    if prefixed:
        own = prefixed[0].get("items", True)
        others = [s["items"] for s in found if "items" in s and s is not prefixed[0]]
        merged["prefixItems"] = [b.all_of([p, *others]) for p in prefixed[0]["prefixItems"]]
        items = [own, *others]
    if items:
        merged["items"] = b.all_of(items)
    return array_rule(b, b.shapes.keep(merged))
