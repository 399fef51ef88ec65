"""Value tests of object conditions in the grammar form: `if: {"properties": {"plan": {"const":
"team"}}}` beside `properties`.

presence.py turns such a condition into a predicate over the keys an object has and the *facts*
its values establish (fact = key K's value passes subschema S). `value_options(b, key, value,
facts, fact_bits)` splits the values of K into one symbol per outcome of its tests: the scalar
values as flat automata (intersections and differences of K's values with each S), objects and
arrays whole where every S says the same of all of them (S admits no objects, or says nothing
of them). The member rules of the object (grammar_rules._Members) then record, with the key,
the facts of the value written, and the predicate is read where the object closes.

What cannot be split so is refused (ValueTestsRefused, reported by the caller as the keywords
that could not be combined). The split symbols of one key share a position, so the grammar is
checked like a union (GrammarBuilder.build): numbers split by a test such as `const: 1` (the
token `1` begins `12`) are refused there.
"""

from __future__ import annotations

import itertools

from sgl_runtime.constrained.automata import work_budget
from sgl_runtime.constrained.automata_ops import difference, intersect
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.object_union import followed_refs
from sgl_runtime.constrained.json_schema.shapes import ARRAY, OBJECT, SCALAR

MAX_TESTS_PER_KEY = 3


class ValueTestsRefused(ConstraintError):
    """A key's values cannot be split by its tests in the grammar form."""


class ReadsInside(ValueTestsRefused):
    """A test reads inside a key's object or array values (if_split.py may split the object instead)."""


def value_options(b, key: str, value, facts: list, fact_bits: dict) -> list:
    """[(symbol, fact bits)] covering the values of `key` (schema `value`) once each, by which of
    `facts` ([(fact, subschema)]) they pass."""
    if len(facts) > MAX_TESTS_PER_KEY:
        raise ValueTestsRefused(f"more than {MAX_TESTS_PER_KEY} value tests on the key {key!r}")
    admitted = b.shapes.admits(value)
    out = []
    if SCALAR in admitted:
        out += _scalar_cells(b, key, value, facts, fact_bits)
    for c in (OBJECT, ARRAY):
        if c not in admitted:
            continue
        symbol = b.node(value, frozenset({c}))
        if symbol is None:
            continue
        bits = 0
        for fact, sub in facts:
            implied = _implied(b, value, sub)
            if c in b.shapes.admits(sub) and not b.trivial(sub, c) and not implied:
                raise ReadsInside(f"a test of the key {key!r} reads inside its {c} values")
            bits |= fact_bits[fact] if implied or c in b.shapes.admits(sub) else 0
        out.append((symbol, bits))
    return out


def _implied(b, value, sub) -> bool:
    """Whether every value of the key passes the test `sub` because `sub` is one of the schemas the
    key's value must satisfy anyway (Dependabot's `oneOf: [{"properties": {"directories": {"$ref":
    "#/definitions/update/properties/directories"}}, "required": ["directories"]}, ...]` beside that
    very `properties` entry): then the test asks only that the key be present."""
    parts = value["allOf"] if isinstance(value, dict) and set(value) == {"allOf"} else [value]
    target = followed_refs(b, sub)
    return any(followed_refs(b, part) is target for part in parts)


def _scalar_cells(b, key: str, value, facts: list, fact_bits: dict) -> list:
    try:
        with work_budget(b.leaf_budget):
            base = b.comp.compile(b.shapes.scalars(value), 0, b.mode)  # container-free: scalars only
            tests = [b.comp.compile(b.shapes.scalars(sub), 0, b.mode) for _, sub in facts]  # base has no containers
            cells = []
            for passes in itertools.product((True, False), repeat=len(facts)):
                dfa = base
                for passed, test in zip(passes, tests):
                    dfa = intersect(dfa, test) if passed else difference(dfa, test)
                if not dfa.is_empty():
                    bits = sum(fact_bits[fact] for (fact, _), passed in zip(facts, passes) if passed)
                    cells.append((dfa, bits))
    except ConstraintError as exc:
        raise ValueTestsRefused(f"the values of the key {key!r} cannot be split by its tests: {exc}") from None
    return [(b.terminal(dfa), bits) for dfa, bits in cells]
