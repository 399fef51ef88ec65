"""oneOf over object alternatives that do not exclude each other by their keys alone
(object_union.exclusive), rewritten as alternatives that do and that together allow the same objects:

- two alternatives that every object satisfies (`{"additionalProperties": true}` beside
  `{"type": "object"}`): every object satisfies both, so no object is valid;
- alternatives that differ only in the value schema of one key they all require (Bitbucket's two
  `import` formats): one alternative whose key takes the values exactly one of them allows (a
  `oneOf` over the values, which the flat compiler says exactly);
- closed alternatives (`properties`, `additionalProperties: false`, maybe `required`) that share
  optional keys with equal value schemas (Buildkite's `{"email": ..., "if": ...}`,
  `{"slack": ..., "if": ...}`; CloudFormation's one-optional-key objects): an object with a key
  that one alternative alone allows can satisfy that one alone; an object whose keys are all
  shared satisfies every alternative whose required keys it has and that allows them all, or
  none of them (the shared values' schemas are equal). Where that is never exactly one
  alternative, for every set of shared keys, such objects are invalid, and each alternative
  keeps its objects with a key of its own.

Anything else gives None, and the caller refuses the oneOf.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import combinations
from typing import Optional

from sgl_runtime.constrained.json_schema.shapes import ASSERTING, OBJECT, SILENT_ON

MAX_SHARED_KEYS = 8  # keys several closed alternatives allow (every subset of them is counted)
_CLOSED = frozenset(("type", "properties", "required", "additionalProperties"))


def exclusive_alternatives(b, resolved: list) -> Optional[list]:
    """Alternatives that exclude each other and allow the objects that satisfy exactly one of
    `resolved` (the branches, `$ref`s that are all they say followed; []: no object does), or None."""
    everywhere = sum(_every_object(b, r, 0) for r in resolved)
    if everywhere >= 2:
        return []
    if everywhere or not all(isinstance(r, dict) for r in resolved):
        return None  # (one alternative holds everywhere: the rest would need a complement)
    merged = _one_key_apart(b, resolved)
    return [merged] if merged is not None else _own_keys(b, resolved)


def _every_object(b, schema, depth: int) -> bool:
    """Whether every object satisfies `schema` (False when unsure)."""
    if schema is True:
        return True
    if not isinstance(schema, dict) or depth > 16 or OBJECT not in b.shapes.admits(schema):
        return False
    for keyword, value in schema.items():
        if keyword in ("additionalProperties", "unevaluatedProperties", "propertyNames"):
            holds = value is True or value == {}
        elif keyword in ("properties", "patternProperties"):
            holds = isinstance(value, dict) and all(v is True or v == {} for v in value.values())
        elif keyword == "$ref":
            holds = _every_object(b, b.shapes.target(schema), depth + 1)
        elif keyword in ("allOf", "anyOf"):
            found = [_every_object(b, s, depth + 1) for s in value] if isinstance(value, list) else [False]
            holds = all(found) if keyword == "allOf" else any(found)
        else:  # `type` admits objects (admits above); annotations say nothing
            holds = keyword == "type" or keyword in SILENT_ON[OBJECT] or keyword not in ASSERTING
        if not holds:
            return False
    return True


def _same(b, values: list) -> bool:
    """Whether the subschemas `values` are written alike, their `$ref`s resolving alike."""
    texts = {json.dumps(v, sort_keys=True, default=str) for v in values}
    return len(texts) == 1 and len({b.comp.refs.base(v) for v in values if isinstance(v, dict)}) <= 1


def _one_key_apart(b, alternatives: list):
    """One alternative equal to all of `alternatives` except that the value of the one key where
    they differ, which they all require, is a oneOf of theirs; or None."""
    first = alternatives[0]
    if len({b.comp.refs.base(a) for a in alternatives}) != 1 or any(set(a) != set(first) for a in alternatives):
        return None
    if not all(_same(b, [a[k] for a in alternatives]) for k in first if k != "properties"):
        return None
    props = [a.get("properties") for a in alternatives]
    if not all(isinstance(p, dict) and set(p) == set(props[0]) for p in props):
        return None
    apart = [k for k in props[0] if not _same(b, [p[k] for p in props])]
    required = first.get("required", [])
    if len(apart) != 1 or not isinstance(required, list) or apart[0] not in required:
        return None
    key = apart[0]
    values = b.shapes.keep({"oneOf": [p[key] for p in props]})
    merged = b.shapes.keep({**first, "properties": {**props[0], key: values}})
    for made in (values, merged):
        b.comp.refs.base_of[id(made)] = b.comp.refs.base(first)
    return merged


def _own_keys(b, alternatives: list):
    """Closed alternatives sharing optional keys, each kept for its objects with a key of its own
    (see the module docstring); None where they are not of that kind."""
    allowed, required = [], []
    for a in alternatives:
        props, needs = a.get("properties", {}), a.get("required", [])
        if a.get("additionalProperties") is not False or not isinstance(props, dict) or not isinstance(needs, list):
            return None
        if any(k in ASSERTING and k not in _CLOSED for k in a):
            return None
        allowed.append([k for k, v in props.items() if v is not False])
        required.append(set(needs))
    counts = Counter(k for keys in allowed for k in keys)
    shared = [k for k in counts if counts[k] >= 2]
    if len(shared) > MAX_SHARED_KEYS:
        return None
    for key in shared:
        if not _same(b, [a["properties"][key] for a, keys in zip(alternatives, allowed) if key in keys]):
            return None
    for n in range(len(shared) + 1):
        for keys in map(set, combinations(shared, n)):
            if sum(needs <= keys <= set(mine) for needs, mine in zip(required, allowed)) == 1:
                return None  # objects of shared keys only that one alternative alone allows
    out = []
    for a, keys, needs in zip(alternatives, allowed, required):
        own = [k for k in keys if counts[k] == 1]
        if not own:
            continue  # its objects have shared keys only
        if needs & set(own):
            out.append(a)
            continue
        wrapped = b.shapes.keep({"allOf": [a, {"anyOf": [{"required": [k]} for k in own]}]})
        b.comp.refs.base_of[id(wrapped)] = b.comp.refs.base(a)
        out.append(wrapped)
    return out
