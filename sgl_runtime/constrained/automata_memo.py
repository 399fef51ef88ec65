"""A bounded, process-wide memo of the pure automaton operations (union, intersect, concat,
difference, exactly_one).

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

MEMO_STATES = 200_000  # result states kept, in all (least recently used go first)
MEMO_MAX_RESULT = 20_000  # a result with more states is not kept

_entries: OrderedDict = OrderedDict()  # (operation, operands) -> (result, states charged)
_kept_states = [0]
_lock = threading.Lock()


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
        if result.num_states <= MEMO_MAX_RESULT:
            with _lock:
                if key not in _entries:
                    _entries[key] = (result, cost)
                    _kept_states[0] += result.num_states
                while _kept_states[0] > MEMO_STATES and _entries:
                    _, (old, _) = _entries.popitem(last=False)
                    _kept_states[0] -= old.num_states
        return result

    return wrapper


def clear() -> None:
    """Forget every kept result (tests, benchmarks of cold compiles)."""
    with _lock:
        _entries.clear()
        _kept_states[0] = 0
