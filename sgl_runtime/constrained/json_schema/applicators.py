"""The in-place applicators of a schema (allOf, anyOf, oneOf, not, if/then/else, dependentSchemas)
as automaton algebra over their subschemas' languages; `universe` is any value at this level."""

from __future__ import annotations

from sgl_runtime.constrained.automata import Dfa
from sgl_runtime.constrained.automata_ops import difference, exactly_one, intersect, union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.values import EXACT, FREE_ORDER


def applicator_parts(comp, schema: dict, level: int, mode: int, universe: Dfa) -> list:
    parts = [comp.compile(s, level, mode) for s in schema_list(schema, "allOf")]
    if "anyOf" in schema:
        parts.append(union(*(comp.compile(s, level, mode) for s in schema_list(schema, "anyOf"))))
    if "oneOf" in schema:
        parts.append(_one_of(comp, schema_list(schema, "oneOf"), level, mode))
    if "not" in schema:
        parts.append(difference(universe, comp.compile(schema["not"], level, EXACT)))
    if "if" in schema:
        parts.append(_if_then_else(comp, schema, level, mode, universe))
    return parts


def _one_of(comp, schemas: list, level: int, mode: int) -> Dfa:
    exacts = [comp.compile(s, level, EXACT) for s in schemas]
    if mode == EXACT:
        return exactly_one(*exacts)
    parts = []
    for i, s in enumerate(schemas):
        others = exacts[:i] + exacts[i + 1 :]
        parts.append(difference(comp.compile(s, level, mode), *others))
    return union(*parts)


def _if_then_else(comp, schema: dict, level: int, mode: int, universe: Dfa) -> Dfa:
    cond_exact = comp.compile(schema["if"], level, EXACT)
    cond = cond_exact if mode == EXACT else comp.compile(schema["if"], level, mode)
    then = comp.compile(schema.get("then", True), level, mode)
    other = comp.compile(schema.get("else", True), level, mode)
    return union(intersect(cond, then), intersect(difference(universe, cond_exact), other))


def dependent_schemas(comp, deps, level: int, mode: int, universe: Dfa) -> Dfa:
    """Objects with key k must also match deps[k]: (no k) | (has k & deps[k]), k by k."""
    if not isinstance(deps, dict):
        raise ConstraintError("dependentSchemas: expected an object")
    parts = []
    for key, sub in deps.items():
        has_key = comp.compile(comp.keep({"type": "object", "required": [key]}), level, EXACT)
        parts.append(
            union(
                difference(universe, has_key),
                intersect(has_key, comp.compile(sub, level, max(mode, FREE_ORDER))),
            )
        )
    return intersect(*parts) if parts else universe


def schema_list(schema: dict, keyword: str) -> list:
    value = schema[keyword] if keyword in schema else []
    if not isinstance(value, list) or (keyword in schema and not value):
        raise ConstraintError(f"{keyword}: expected a non-empty list of schemas")
    return value
