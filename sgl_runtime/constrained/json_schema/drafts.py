"""A schema of the draft its `$schema` declares (04, 06, 07, 2019-09, 2020-12), rewritten into the
draft 2020-12 schema with the same meaning, which is what the compiler reads.

Per draft, as jsonschema's validator for that draft reads it (its keyword table is the source
of truth for which keywords a draft has):
- `dependencies` (04-07): array values become `dependentRequired`, schema values `dependentSchemas`;
- array `items` with `additionalItems` (04-2019-09) become `prefixItems` and `items`;
- draft-04 `id` becomes `$id` (or `$anchor` for a bare fragment), and its boolean
  `exclusiveMinimum` / `exclusiveMaximum` the numeric keywords of later drafts;
- `$ref` (04-07) ignores its siblings, so they are dropped;
- keywords a declared draft does not have (e.g. `prefixItems` or `dependentRequired` in draft-07)
  are dropped, since that draft's validators ignore them.
Applicators that always hold are then left out (simplify.py). Schemas without `$schema` are read
as 2020-12; AWS CloudFormation's resource provider definition
metaschema (draft-07 plus annotations) as draft-07; any other `$schema` is refused.
"""

from __future__ import annotations

import re

from jsonschema import validators

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.simplify import without_trivial_applicators

DRAFTS = {
    "draft-04": validators.Draft4Validator,
    "draft-06": validators.Draft6Validator,
    "draft-07": validators.Draft7Validator,
    "2019-09": validators.Draft201909Validator,
    "2020-12": validators.Draft202012Validator,
}
# the official metaschema URIs (http or https, with or without the empty fragment), as jsonschema knows them
_METASCHEMA = re.compile(r"https?://json-schema\.org/(?:(draft-0[467])/schema|draft/(2019-09|2020-12)/schema)#?")
# metaschemas of other dialects that declare one of those drafts as their own `$schema` and add only
# annotations: AWS CloudFormation's resource provider definition schema (draft-07)
_CLOUDFORMATION = r"https://schema\.cloudformation\.[a-z0-9-]+\.amazonaws\.com/provider\.definition\.schema\.v1\.json#?"
_DIALECTS = ((re.compile(_CLOUDFORMATION), "draft-07"),)
_LATEST = set(validators.Draft202012Validator.VALIDATORS)
_SINGLE = (
    "not",
    "if",
    "then",
    "else",
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_LISTS = ("allOf", "anyOf", "oneOf", "items", "prefixItems")
_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies")


def declared_draft(schema) -> str:
    """The draft named by the root's `$schema` ("2020-12" when absent)."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if uri is None:
        return "2020-12"
    match = _METASCHEMA.fullmatch(uri) if isinstance(uri, str) else None
    if match:
        return match.group(1) or match.group(2)
    for dialect, draft in _DIALECTS:
        if isinstance(uri, str) and dialect.fullmatch(uri):
            return draft
    raise ConstraintError(
        f"$schema: unsupported metaschema {uri!r} (supported: the draft-04, -06, -07, 2019-09 and 2020-12 "
        "metaschemas of json-schema.org; a custom metaschema's $vocabulary could change what keywords mean)"
    )


def to_latest(schema):
    """`schema` (of its declared draft) as the equivalent draft 2020-12 schema, without the
    applicators that always hold (simplify.py)."""
    draft = declared_draft(schema)
    if draft != "2020-12":
        schema = _rewrite(schema, draft, set(DRAFTS[draft].VALIDATORS))
    return without_trivial_applicators(schema)


def _rewrite(node, draft: str, keywords: set):
    if not isinstance(node, dict):
        return node
    kept = keywords | ({"exclusiveMinimum", "exclusiveMaximum"} if draft == "draft-04" else set())
    out = {k: v for k, v in node.items() if k not in _LATEST or k in kept}
    if "dependencies" not in keywords:
        out.pop("dependencies", None)  # 2019-09 split it into dependentRequired / dependentSchemas
    if "$ref" in out and draft in ("draft-04", "draft-06", "draft-07"):
        out = {k: v for k, v in out.items() if k in ("$ref", "definitions", "$defs")}
    for key in _SINGLE:
        if key in out and isinstance(out[key], (dict, bool)):
            out[key] = _rewrite(out[key], draft, keywords)
    for key in _LISTS:
        if key in out and isinstance(out[key], list):
            out[key] = [_rewrite(s, draft, keywords) for s in out[key]]
    for key in _MAPS:
        if key in out and isinstance(out[key], dict):
            out[key] = {k: _rewrite(s, draft, keywords) for k, s in out[key].items()}
    _tuple_items(out)
    _dependencies(out)
    if draft == "draft-04":
        _draft4(out)
    if isinstance(out.get("$id"), str) and out["$id"].startswith("#"):
        out["$anchor"] = out.pop("$id")[1:]
    return out


def _tuple_items(schema: dict) -> None:
    items = schema.get("items")
    if isinstance(items, list):
        schema["prefixItems"] = schema.pop("items")
        if "additionalItems" in schema:
            schema["items"] = schema.pop("additionalItems")
    else:
        schema.pop("additionalItems", None)  # meaningless without array items


def _dependencies(schema: dict) -> None:
    deps = schema.pop("dependencies", None)
    if deps is None:
        return
    if not isinstance(deps, dict):
        raise ConstraintError("dependencies: expected an object")
    required = {k: v for k, v in deps.items() if isinstance(v, list)}
    schemas = {k: v for k, v in deps.items() if not isinstance(v, list)}
    if required:
        schema["dependentRequired"] = {**schema.get("dependentRequired", {}), **required}
    if schemas:
        schema["dependentSchemas"] = {**schema.get("dependentSchemas", {}), **schemas}


def _draft4(schema: dict) -> None:
    if isinstance(schema.get("id"), str):
        schema["$id"] = schema.pop("id")
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = schema.pop(exclusive, None)
        if flag is None:
            continue
        if not isinstance(flag, bool):
            raise ConstraintError(f"{exclusive}: draft-04 expects a boolean, got {flag!r}")
        if flag and bound in schema:
            schema[exclusive] = schema.pop(bound)


def check_options(schema, integral_floats, key_order) -> None:
    """ConstraintError on json_schema options that are malformed or contradict the schema's draft."""
    if not isinstance(integral_floats, bool):
        raise ConstraintError(f"integral_floats: expected a boolean, got {integral_floats!r}")
    if integral_floats and declared_draft(schema) == "draft-04":
        raise ConstraintError("integral_floats: draft-04 does not count 1.0 as an integer")
    if key_order not in ("properties", "any"):
        raise ConstraintError(f"key_order: expected 'properties' or 'any', got {key_order!r}")
