"""unevaluatedProperties / unevaluatedItems next to in-place applicators, as an exact case split.

Which keys (items) count as evaluated depends on which subschemas an instance satisfies. The
instance space is split into cases by exact branch conditions (anyOf subsets, the one oneOf
branch, if or else, each dependentSchemas key present or not); in each case the evaluated
set is static: property names, patterns, "all" (additionalProperties or a nested unevaluated*),
or for arrays a prefix length / "all" / items matching a `contains`. The constraint is the
union over cases of (condition & every unevaluated key/item satisfies the schema). Branches
nest: their cases are crossed with the enclosing condition (bounded by MAX_CASES).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from sgl_runtime.constrained.automata import ANY_CHAR, Dfa, charset
from sgl_runtime.constrained.automata_ops import difference, intersect, union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.values import EXACT, FREE_ORDER

MAX_BRANCHES = 4
# Applicators that evaluate keys and items in place (what unevaluated* must look through).
IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "dependentSchemas", "$dynamicRef")
MAX_CASES = 32
_SIGMA_STAR = Dfa((((ANY_CHAR, 0),),), frozenset({0}))


@dataclass(frozen=True)
class Evaluated:
    names: frozenset = frozenset()
    patterns: frozenset = frozenset()
    prefix: int = 0
    everything: bool = False
    contains: tuple = ()  # `contains` subschemas: an item matching one of them is evaluated

    def __or__(self, other: "Evaluated") -> "Evaluated":
        contains = self.contains + tuple(c for c in other.contains if not any(c is d for d in self.contains))
        return Evaluated(
            self.names | other.names,
            self.patterns | other.patterns,
            max(self.prefix, other.prefix),
            self.everything or other.everything,
            contains,
        )


def needs_case_split(schema: dict) -> bool:
    if all(schema.get(k, True) is True for k in ("unevaluatedProperties", "unevaluatedItems")):
        return False
    return any(k in schema for k in IN_PLACE) or ("contains" in schema and "unevaluatedItems" in schema)


def unevaluated_constraint(comp, schema: dict, level: int, mode: int) -> Dfa:
    """Instances whose unevaluated properties and items satisfy the unevaluated* schemas."""
    parts = []
    for keyword, container in (("unevaluatedProperties", "{"), ("unevaluatedItems", "[")):
        if schema.get(keyword, True) is True:
            continue
        cases = _Cases(comp, level, keyword).of(schema, 0)
        checks = [_check(comp, keyword, schema[keyword], ev, level, mode) for _, ev in cases]
        in_case = [chk if cond is None else intersect(cond, chk) for (cond, _), chk in zip(cases, checks)]
        parts.append(union(_not_starting_with(container), *in_case))
    return intersect(*parts)


def _not_starting_with(c: str) -> Dfa:
    return Dfa((((ANY_CHAR - charset(c), 1),), ((ANY_CHAR, 1),)), frozenset({1}))


def _check(comp, keyword: str, rest_schema, ev: Evaluated, level: int, mode: int) -> Dfa:
    """Objects (arrays) whose keys (items) outside `ev` satisfy `rest_schema`."""
    from sgl_runtime.constrained.json_schema.arrays import array_dfa
    from sgl_runtime.constrained.json_schema.objects import object_dfa

    check_mode = EXACT if mode == EXACT else FREE_ORDER
    if ev.everything:
        return _SIGMA_STAR
    if keyword == "unevaluatedProperties":
        synthetic = comp.keep(
            {
                "properties": {n: True for n in sorted(ev.names)},
                "patternProperties": {p: True for p in sorted(ev.patterns)},
                "additionalProperties": rest_schema,
            }
        )
        return object_dfa(comp, synthetic, level, check_mode)
    items = comp.keep({"anyOf": [rest_schema, *ev.contains]}) if ev.contains else rest_schema
    synthetic = comp.keep({"prefixItems": [True] * ev.prefix, "items": items})
    return array_dfa(comp, synthetic, level, check_mode)


class _Cases:
    """[(condition DFA or None, Evaluated)] covering every instance of a schema."""

    def __init__(self, comp, level: int, keyword: str) -> None:
        self.comp, self.level, self.keyword = comp, level, keyword

    def exact(self, schema) -> Dfa:
        return self.comp.compile(schema, self.level, EXACT)

    def of(self, schema, depth: int) -> list[tuple[Dfa | None, Evaluated]]:
        if not isinstance(schema, dict):
            return [(None, Evaluated())]
        if depth > 8:
            raise ConstraintError(f"{self.keyword}: $ref chain too deep to collect evaluated keys")
        cases = [(None, self.own(schema, depth))]
        for member in schema.get("allOf", []):
            cases = _cross(cases, self.of(member, depth + 1))
        if "$ref" in schema:
            cases = _cross(cases, self.of(self.comp.refs.resolve(schema["$ref"], schema), depth + 1))
        if "$dynamicRef" in schema:
            raise ConstraintError(f"{self.keyword}: evaluation through $dynamicRef is not supported")
        if "anyOf" in schema:
            cases = _cross(cases, self.any_of(schema["anyOf"], depth))
        if "oneOf" in schema:
            cases = _cross(cases, self.one_of(schema["oneOf"], depth))
        if "if" in schema:
            cases = _cross(cases, self.if_then_else(schema, depth))
        for key, sub in schema.get("dependentSchemas", {}).items():
            has_key = self.exact(self.comp.keep({"type": "object", "required": [key]}))
            cases = _cross(
                cases, self.conditioned(sub, has_key, depth) + [(difference(_SIGMA_STAR, has_key), Evaluated())]
            )
        return cases

    def own(self, schema: dict, depth: int) -> Evaluated:
        if self.keyword == "unevaluatedProperties":
            props = schema.get("properties", {})
            return Evaluated(
                names=frozenset(props),
                patterns=frozenset(schema.get("patternProperties", {})),
                everything=(depth > 0 and "unevaluatedProperties" in schema) or "additionalProperties" in schema,
            )
        return Evaluated(
            prefix=len(schema.get("prefixItems", [])),
            everything=(depth > 0 and "unevaluatedItems" in schema) or "items" in schema,
            contains=(schema["contains"],) if "contains" in schema else (),
        )

    def conditioned(self, schema, cond: Dfa | None, depth: int) -> list:
        """The cases of `schema` (a branch), each restricted to `cond`."""
        return _cross([(cond, Evaluated())], self.of(schema, depth + 1))

    def any_of(self, branches: list, depth: int) -> list:
        if len(branches) > MAX_BRANCHES:
            raise ConstraintError(f"{self.keyword}: anyOf with more than {MAX_BRANCHES} branches")
        exacts = [self.exact(b) for b in branches]
        cases = []
        for r in range(1, len(branches) + 1):
            for chosen in combinations(range(len(branches)), r):
                inside = intersect(*(exacts[i] for i in chosen))
                cond = difference(inside, *(exacts[j] for j in range(len(branches)) if j not in chosen))
                if cond.is_empty():
                    continue
                sub = [(cond, Evaluated())]
                for i in chosen:
                    sub = _cross(sub, self.of(branches[i], depth + 1))
                cases += sub
        return cases

    def one_of(self, branches: list, depth: int) -> list:
        exacts = [self.exact(b) for b in branches]
        cases = []
        for i, branch in enumerate(branches):
            cond = difference(exacts[i], *(exacts[:i] + exacts[i + 1 :]))
            cases += self.conditioned(branch, cond, depth)
        return cases

    def if_then_else(self, schema: dict, depth: int) -> list:
        cond = self.exact(schema["if"])
        then_cases = _cross(self.conditioned(schema["if"], cond, depth), self.of(schema.get("then", True), depth + 1))
        else_cases = self.conditioned(schema.get("else", True), difference(_SIGMA_STAR, cond), depth)
        return then_cases + else_cases


def _cross(left: list, right: list) -> list:
    out = []
    for cond_a, ev_a in left:
        for cond_b, ev_b in right:
            if cond_a is None or cond_b is None:
                cond = cond_b if cond_a is None else cond_a
            else:
                cond = intersect(cond_a, cond_b)
            if cond is None or not cond.is_empty():
                out.append((cond, ev_a | ev_b))
    if len(out) > MAX_CASES:
        raise ConstraintError(f"unevaluated*: more than {MAX_CASES} evaluation cases")
    return out
