"""Compact serialisation of an instance in the key order the schema compiler expects:
each object's keys declared in its schema's `properties` first (schema order; then those of the
anyOf/oneOf branch, or `then` / `else`, that declares most of its keys), then the rest in instance order. Keys that
`dependentRequired` names count among the rest (the compiler takes them in any order, objects.py).
An undeclared key's value is ordered by the patternProperties entry it matches, else by
additionalProperties (of the object's schema, else of the branch that allows objects)."""

from __future__ import annotations

import json
import re
from typing import Optional

from sgl_runtime.constrained.json_schema.dynamic_refs import static_dynamic_refs
from sgl_runtime.constrained.json_schema.refs import RefResolver


def compact_json(instance, schema=None) -> str:
    """`json.dumps(instance, separators=(",", ":"), ensure_ascii=False)` with schema key order."""
    schema = static_dynamic_refs(schema)  # the grammar form's reading of $dynamicRef / $recursiveRef
    resolver = RefResolver(schema) if isinstance(schema, dict) else None
    return json.dumps(_ordered(instance, schema, resolver, 0), separators=(",", ":"), ensure_ascii=False)


def _resolve(schema, resolver, hops: int = 0):
    while isinstance(schema, dict) and "$ref" in schema and "properties" not in schema and hops < 16:
        try:
            schema = resolver.resolve(schema["$ref"], schema)
        except ValueError:
            return None
        hops += 1
    return schema if isinstance(schema, dict) else None


def _declared(schema, resolver, dependent: Optional[set] = None) -> dict:
    """Declared keys -> their first declaring subschema, in the order the compiler writes them: the
    schema's own `properties`, then its `$ref` target's, then each `allOf` member's, depth first.
    Adds the keys a `dependentRequired` there names to `dependent`."""
    out: dict = {}
    seen: set = set()
    dependent = set() if dependent is None else dependent

    def visit(node, hops: int) -> None:
        if not isinstance(node, dict) or id(node) in seen or hops > 64:
            return
        seen.add(id(node))
        props = node.get("properties")
        for key, sub in props.items() if isinstance(props, dict) else ():
            out.setdefault(key, sub)
        deps = node.get("dependentRequired")
        for key, needs in deps.items() if isinstance(deps, dict) else ():
            dependent.update([key, *(needs if isinstance(needs, list) else ())])
        if isinstance(node.get("$ref"), str):
            try:
                visit(resolver.resolve(node["$ref"], node), hops + 1)
            except ValueError:
                pass
        for member in node.get("allOf") if isinstance(node.get("allOf"), list) else ():
            visit(member, hops + 1)

    visit(schema, 0)
    return out


def _branch(schema, value: dict, resolver):
    """Of `schema`'s anyOf/oneOf branches, the first that declares the most of `value`'s keys, else
    the first whose `type` allows objects and says what its undeclared keys are."""
    if not isinstance(schema, dict):
        return None
    branches = [b for word in ("anyOf", "oneOf") if isinstance(schema.get(word), list) for b in schema[word]]
    branches += [schema[word] for word in ("then", "else") if word in schema]  # an if split into two (if_split.py)
    best, most = None, 0
    for branch in branches:
        declared = _declared(branch, resolver)
        count = sum(k in declared for k in value)
        if count > most:
            best, most = branch, count
    if best is None:
        for branch in branches:
            resolved = _resolve(branch, resolver)
            kind = (resolved or {}).get("type")
            if isinstance((resolved or {}).get("additionalProperties"), dict) and kind in ("object", None):
                return resolved
    return best


def _undeclared(schemas: list, key: str):
    """The subschema of an undeclared `key`: the first patternProperties entry of `schemas` whose
    pattern it matches, else the first additionalProperties."""
    for schema in schemas:
        patterns = schema.get("patternProperties")
        for pattern, sub in patterns.items() if isinstance(patterns, dict) else ():
            try:
                if re.search(pattern, key):
                    return sub
            except re.error:
                continue
    return next((s["additionalProperties"] for s in schemas if "additionalProperties" in s), None)


def _ordered(value, schema, resolver, depth: int):
    if resolver is None or depth >= 64:
        schema = None
    if isinstance(value, dict):
        dependent: set = set()
        props = _declared(schema, resolver, dependent) if schema is not None else {}
        resolved = _resolve(schema, resolver) if schema is not None else None
        branch = _branch(resolved, value, resolver)
        if branch is not None:  # the keys of the anyOf/oneOf branch the value is most likely in
            props = {**props, **{k: sub for k, sub in _declared(branch, resolver, dependent).items() if k not in props}}
        first = [k for k in props if k in value and k not in dependent]
        keys = first + [k for k in value if k not in first]
        out = {}
        others = [resolved or {}, (_resolve(branch, resolver) or {}) if branch is not None else {}]
        for k in keys:
            sub = props.get(k) if k in props else _undeclared(others, k)
            out[k] = _ordered(value[k], sub, resolver, depth + 1)
        return out
    schema = _resolve(schema, resolver) if schema is not None else None
    if isinstance(value, list):
        prefix = (schema or {}).get("prefixItems", [])
        prefix = prefix if isinstance(prefix, list) else []
        rest = (schema or {}).get("items")
        return [_ordered(v, prefix[i] if i < len(prefix) else rest, resolver, depth + 1) for i, v in enumerate(value)]
    return value
