"""`$dynamicRef` and `$recursiveRef` where the document alone decides their target.

Both follow the dynamic scope: a `$dynamicRef` that lands on a `$dynamicAnchor` goes to the
outermost resource entered so far that defines that anchor (2020-12); a `$recursiveRef` that lands
on a resource with `$recursiveAnchor: true` goes to the outermost of the resources entered so far
that carry it without a gap (2019-09, as jsonschema reads it). The entry schema is always the
outermost resource, so where it defines the anchor (as the 2019-09 and 2020-12 metaschemas do, and
schemas that extend them), or where only one resource does, the target is fixed and the reference
is a plain `$ref`. `static_dynamic_refs(schema)` rewrites them so for the grammar form: a copy of
the document with each such reference a `$ref` to an absolute URI, and the metaschemas it reaches
embedded under `$defs` (by their `$id`s, rewritten alike); any other dynamic reference leaves
the schema as it is (the grammar form then refuses it by name).
"""

from __future__ import annotations

from typing import Optional
from urllib.parse import urldefrag

from sgl_runtime.constrained.json_schema.refs import RefResolver, _join

BUNDLED = "sgl-bundled-"  # the $defs names of the embedded metaschemas


def static_dynamic_refs(schema):
    """`schema`, or its bundled copy whose dynamic references are plain `$ref`s (see the module)."""
    if not isinstance(schema, dict):
        return schema
    refs = RefResolver(schema)
    if not refs.dynamic_nodes:
        return schema
    targets = {}
    for node in refs.dynamic_nodes:
        target = _static_target(refs, node)
        if target is None:
            return schema
        targets[id(node)] = target
    memo: dict = {}
    out = _copy(schema, targets, memo)
    defs = dict(out.get("$defs", {})) if isinstance(out.get("$defs"), dict) else {}
    for i, (url, doc) in enumerate(refs.loaded.items()):
        copied = _copy(doc, targets, memo)
        if isinstance(copied, dict):
            copied = {**copied, "$id": url}
        defs[f"{BUNDLED}{i}"] = copied
    return {**out, "$defs": defs} if defs else out


def _static_target(refs: RefResolver, node: dict) -> Optional[str]:
    """The absolute URI the node's dynamic reference always resolves to, or None."""
    dynamic = "$dynamicRef" in node
    ref = node["$dynamicRef" if dynamic else "$recursiveRef"]
    if not isinstance(ref, str) or "$ref" in node:
        return None
    initial = refs.resolve(ref, node)
    absolute = _join(refs.base(node), ref)
    root_base = refs.base(refs.root)
    if dynamic:
        fragment = urldefrag(absolute)[1]
        if not fragment or fragment.startswith("/") or not isinstance(initial, dict):
            return absolute
        if initial.get("$dynamicAnchor") != fragment:
            return absolute  # no bookend: a plain reference
        if f"{root_base}#{fragment}" in refs.dynamic_anchors:
            return f"{root_base}#{fragment}"
        defining = [k for k in refs.dynamic_anchors if urldefrag(k)[1] == fragment]
        return absolute if len(defining) == 1 else None
    if not (isinstance(initial, dict) and initial.get("$recursiveAnchor") is True):
        return absolute
    anchored = [r for r in refs.resources.values() if isinstance(r, dict) and r.get("$recursiveAnchor") is True]
    if len(anchored) == len([r for r in refs.resources.values() if isinstance(r, dict)]):
        return root_base  # every resource carries the anchor: the chain reaches the entry schema
    return absolute if len(anchored) == 1 else None


def _copy(node, targets: dict, memo: dict):
    """A copy of `node` sharing structure as the original does, dynamic references rewritten."""
    if isinstance(node, list):
        return [_copy(v, targets, memo) for v in node]
    if not isinstance(node, dict):
        return node
    if id(node) in memo:
        return memo[id(node)]
    out: dict = {}
    memo[id(node)] = out
    for key, value in node.items():
        if key in ("$dynamicRef", "$recursiveRef") and id(node) in targets:
            out["$ref"] = targets[id(node)]
        else:
            out[key] = _copy(value, targets, memo)
    return out
