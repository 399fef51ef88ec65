"""Applicators that always hold, left out before compiling.

An `anyOf` with a member that every value satisfies holds for every value, and so does an `allOf`
member of that kind; such members are common in generated schemas (CloudFormation's
`"anyOf": [{"format": "AWS::KMS::Key.Arn"}, {"format": "AWS::KMS::Key.Id"}]` beside a string's
`maxLength` and `pattern`: the formats are unknown, so annotations), and left in they would make
the compiler build a union of several copies of the string's automaton. A member always holds
when it is `true` or says only annotations: keywords no draft validates (CloudFormation's
`relationshipRef`, say), and `format` values the compiler does not know (formats.py); not `$defs`,
`$id` or an anchor, which a `$ref` elsewhere could name.

Nothing is left out where that could change a verdict beyond the member itself: a document with
`unevaluatedProperties`/`unevaluatedItems` (the other anyOf members' annotations count there), or
with a `$ref` into an `anyOf`/`allOf` (the pointer would move).
"""

from __future__ import annotations

import json

from jsonschema import validators

from sgl_runtime.constrained.json_schema.formats import format_content

_ASSERTING = set(validators.Draft202012Validator.VALIDATORS) - {"format"}
_STRUCTURAL = ("$defs", "definitions", "$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$ref")
_SINGLE = ("not", "if", "then", "else", "additionalProperties", "items", "contains", "propertyNames")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
MAX_DEPTH = 256  # subschemas below are left as they are (the compiler refuses a schema that deep)


def without_trivial_applicators(schema):
    """`schema` with anyOf keywords that always hold, and allOf members that always hold, left out
    (the schema itself where nothing is, or where leaving them out is not safe; see above)."""
    if not isinstance(schema, dict):
        return schema
    try:
        text = json.dumps(schema)
    except (RecursionError, TypeError, ValueError):
        return schema  # too deep or not JSON: the compiler says so
    if "unevaluated" in text or "/anyOf/" in text or "/allOf/" in text:
        return schema
    return _rewrite(schema, 0)


def always_holds(schema) -> bool:
    """Whether every value satisfies `schema` by what it says (True, or only annotations)."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key == "format":
            if not isinstance(value, str) or format_content(value) is not None:
                return False
        elif key in _ASSERTING or key in _STRUCTURAL:
            return False
    return True


def _rewrite(node, depth: int):
    """`node` with its trivial applicators left out (`node` itself where there are none)."""
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return node
    out = dict(node)
    for key in _SINGLE:
        if isinstance(out.get(key), dict):
            out[key] = _rewrite(out[key], depth + 1)
    for key in _LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_rewrite(s, depth + 1) for s in out[key]]
    for key in _MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _rewrite(s, depth + 1) for k, s in out[key].items()}
    if isinstance(out.get("anyOf"), list) and any(always_holds(s) for s in out["anyOf"]):
        del out["anyOf"]
    if isinstance(out.get("allOf"), list) and any(always_holds(s) for s in out["allOf"]):
        kept = [s for s in out["allOf"] if not always_holds(s)]
        if kept:
            out["allOf"] = kept
        else:
            del out["allOf"]
    return node if _same(out, node) else out


def _same(out: dict, node: dict) -> bool:
    """Whether `out` holds the very values of `node` (so that `node`, and its identity, is kept)."""
    if out.keys() != node.keys():
        return False
    for key, value in out.items():
        old = node[key]
        if isinstance(value, list) and key in _LISTS:
            if len(value) != len(old) or any(a is not b for a, b in zip(value, old)):
                return False
        elif isinstance(value, dict) and key in _MAPS:
            if any(value[k] is not old[k] for k in value):
                return False
        elif value is not old:
            return False
    return True
