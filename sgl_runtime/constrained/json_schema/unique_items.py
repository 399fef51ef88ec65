"""`uniqueItems: true` over a small finite item domain: the automaton tracks the set of values used.

Uniqueness is not regular in general, but when every item's language is a finite set of
spellings (`enum`, `const`, `boolean`, `null`, a tuple of those) of at most MAX_VALUES distinct
JSON values, an array state can carry the set of values already used, and an item may only be a
value not in it. Values are compared as JSON Schema (and jsonschema) compare them: `1` equals
`1.0`, `true` does not equal `1`, objects ignore key order. Anything else is refused naming
uniqueItems and the reason (an infinite or too large item domain, or too many states).
"""

from __future__ import annotations

import json

from sgl_runtime.constrained.automata import Dfa, literal
from sgl_runtime.constrained.automata_ops import union
from sgl_runtime.constrained.errors import ConstraintError

MAX_VALUES = 12  # distinct item values: 2**12 sets of used values at most
MAX_SPELLINGS = 256  # strings of one item language that are enumerated
MAX_STATES = 20_000  # (position, contains count, used values) states of the array body


class UniqueItemsUnsupported(ConstraintError):
    """Why uniqueness cannot be tracked exactly here (the caller names the keyword)."""


class ItemValues:
    """Each item language split by JSON value: {value key: Dfa of that value's spellings}."""

    def __init__(self, elements: list[Dfa]) -> None:
        self._by_element: dict[int, dict] = {}
        keys: set = set()
        for element in elements:
            if id(element) not in self._by_element:
                groups = _spellings_by_value(element)
                self._by_element[id(element)] = groups
                keys |= set(groups)
        if len(keys) > MAX_VALUES:
            raise UniqueItemsUnsupported(
                f"the items take {len(keys)} distinct values; tracking which were used is supported for at most "
                f"{MAX_VALUES}"
            )

    def choices(self, element: Dfa, used: frozenset) -> list[tuple[Dfa, frozenset]]:
        """The item spellings still allowed after `used`, one Dfa per value, with the new used set."""
        return [(dfa, used | {key}) for key, dfa in self._by_element[id(element)].items() if key not in used]


def check_state_count(states: int) -> None:
    if states > MAX_STATES:
        raise UniqueItemsUnsupported(f"tracking the used item values needs more than {MAX_STATES} automaton states")


def _spellings_by_value(dfa: Dfa) -> dict:
    strings = _finite_strings(dfa)
    if strings is None:
        raise UniqueItemsUnsupported(
            "uniqueness is exact only when every item is one of a few values (enum, const, boolean, null, or "
            "tuples of those); these items can take infinitely or too many spellings"
        )
    groups: dict = {}
    for text in strings:
        groups.setdefault(value_key(json.loads(text)), []).append(text)
    return {key: union(*(literal(t) for t in texts)) for key, texts in groups.items()}


def value_key(value):
    """A hashable key equal for values JSON Schema calls equal (numbers by value, bools apart)."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, (int, float)):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(value_key(v) for v in value))
    return ("object", frozenset((k, value_key(v)) for k, v in value.items()))


def _finite_strings(dfa: Dfa) -> list[str] | None:
    """Every string `dfa` accepts, or None when there are infinitely many or more than MAX_SPELLINGS."""
    live = _coreachable(dfa)
    if 0 not in live:
        return []
    out: list[str] = []
    on_path: set[int] = set()

    def visit(state: int, prefix: str) -> bool:
        if state in dfa.finals:
            out.append(prefix)
            if len(out) > MAX_SPELLINGS:
                return False
        on_path.add(state)
        for cs, target in dfa.edges[state]:
            if target not in live:
                continue
            if target in on_path or cs.negated or len(cs.chars) > MAX_SPELLINGS:
                return False  # a cycle (infinitely many strings) or a class too wide to list
            for c in sorted(cs.chars):
                if not visit(target, prefix + c):
                    return False
        on_path.discard(state)
        return True

    return out if visit(0, "") else None


def _coreachable(dfa: Dfa) -> set[int]:
    reverse: dict[int, list[int]] = {}
    for s, edges in enumerate(dfa.edges):
        for _, t in edges:
            reverse.setdefault(t, []).append(s)
    seen, stack = set(dfa.finals), list(dfa.finals)
    while stack:
        for s in reverse.get(stack.pop(), ()):
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return seen
