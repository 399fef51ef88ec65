"""A bounded, process-wide memo of the pure automaton operations (union, intersect, concat,
difference, exactly_one) and of the JSON string automata (strings.string_dfa).

A schema compile repeats many of them on equal operands: a leaf restricted to the same value
categories, the boolean `true|false`, the `,"key":` of a property name met in several objects;
and schemas of one family share most of their leaves. The result of an operation depends only on
its operands' languages as given (equal Dfas: equal edges and finals), so it is kept by value. A
hit counts the states its first computation charged against the innermost `work_budget` again, so
whether a schema fits its budget never depends on what was compiled before it.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Callable

from sgl_runtime.constrained.automata import Dfa, charge, charged

MEMO_WEIGHT = 300_000  # weight of the results kept, in all (least recently used go first)
MEMO_MAX_RESULT = 20_000  # a result heavier than this is not kept

_entries: OrderedDict = OrderedDict()  # (operation, operands) -> (result, states charged, weight)
_kept = [0]  # weight kept
_lock = threading.Lock()


def _weight(dfa: Dfa) -> int:
    """A result's share of the bound: its states, and half its listed characters (a Unicode class
    lists up to ~100,000: memory that its state count does not show)."""
    charsets = {id(cs): cs for out in dfa.edges for cs, _ in out}
    return dfa.num_states + sum(len(cs.chars) for cs in charsets.values()) // 2


def memoized(operation: Callable[..., Dfa]) -> Callable[..., Dfa]:
    """`operation(*dfas)`, computed once per distinct operands while kept."""
    name = operation.__name__

    @functools.wraps(operation)
    def wrapper(*dfas: Dfa) -> Dfa:
        key = (name, dfas)
        with _lock:
            hit = _entries.get(key)
            if hit is not None:
                _entries.move_to_end(key)
        if hit is not None:
            charge(hit[1])
            return hit[0]
        start = charged()
        result = operation(*dfas)
        cost = charged() - start
        weight = _weight(result) if result.num_states <= MEMO_MAX_RESULT else MEMO_MAX_RESULT + 1
        if weight <= MEMO_MAX_RESULT:
            with _lock:
                if key not in _entries:
                    _entries[key] = (result, cost, weight)
                    _kept[0] += weight
                while _kept[0] > MEMO_WEIGHT and _entries:
                    _kept[0] -= _entries.popitem(last=False)[1][2]
        return result

    return wrapper


def clear() -> None:
    """Forget every kept result (tests, benchmarks of cold compiles)."""
    with _lock:
        _entries.clear()
        _kept[0] = 0
