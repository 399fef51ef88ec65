"""Whether every lexer context of a placeholder grammar lexes one way only.

The engine's contextual lexer (lexer.py) gives a position to the first terminal of its parser
state that matches, so two terminals of one state where a string of one is a prefix of (or
equal to) a string of the other would hide one of them: text that only the hidden one leads to
would be rejected. Grammars built so that such terminals never meet need no check; one that
unites rules of several schemas (json_schema/object_union.py) is checked here before it is used
(its LALR(1) conflicts are followed each way, grammar/forking.py).
"""

from __future__ import annotations

import numpy as np

from sgl_runtime.constrained.counted import closure_back
from sgl_runtime.constrained.errors import ConstraintError

MAX_PAIRS = 20_000  # state pairs one terminal pair may visit before it counts as overlapping


EQUAL, PREFIX = "equal", "prefix"  # how two terminals' texts overlap (overlapping_pairs)


def refuse_overlaps(pairs: dict) -> None:
    """ConstraintError naming the first of `pairs` (overlapping_pairs, what is left after
    grammar/refine.py): two terminals of one parser state where a string of one is a prefix of (or
    equal to) a string of the other."""
    for a, b in pairs:
        raise ConstraintError(
            f"grammar: terminals {a} and {b} may start at the same position and one's text can begin "
            "the other's, so the lexer could not tell them apart"
        )


def overlapping_pairs(stacks, terminal_dfas: dict) -> dict:
    """{(a, b): EQUAL or PREFIX} for the terminals a < b of one parser state whose texts overlap:
    EQUAL where the only overlap is texts both spell (a lexer cannot choose, but the two could be
    split into disjoint terminals, grammar/refine.py), PREFIX where a text of one is a proper
    prefix of a text of the other. `stacks`: the grammar's LalrStacks (with default reductions,
    only the states it lexes in, those that shift, are checked); `terminal_dfas`: each terminal's
    automaton (ByteDFA, or a CountedDFA read without its count: a superset)."""
    live: dict = {}
    decided: dict = {}
    for state, row in stacks.states.items():
        if state in stacks.uniform or state in stacks.reduce_only:
            continue  # reduced at once after a shift: never the state a token is lexed in
        names = sorted(t for t in row if t.isupper() and t != "$END" and t in terminal_dfas)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if (a, b) not in decided:
                    decided[(a, b)] = _overlap(terminal_dfas[a], terminal_dfas[b], live, a, b)
    return {pair: kind for pair, kind in decided.items() if kind is not None}


def _overlap(dfa_a, dfa_b, live: dict, name_a: str, name_b: str):
    """How strings of the two automata overlap: PREFIX where one is a proper prefix of the other,
    else EQUAL where they share a string, else None."""
    ta, tb = dfa_a.transitions, dfa_b.transitions
    la, lb = _live(dfa_a, live, name_a), _live(dfa_b, live, name_b)
    start = (dfa_a.initial, dfa_b.initial)
    if not (la[start[0]] and lb[start[1]]):
        return None
    seen, todo, equal = {start}, [start], False
    while todo:
        a, b = todo.pop()
        na, nb = ta[a], tb[b]
        if dfa_a.accepting[a] or dfa_b.accepting[b]:  # both live here: one has ended, the other goes on or ends
            on_a, on_b = bool(la[na[na >= 0]].any()), bool(lb[nb[nb >= 0]].any())
            if (
                (dfa_a.accepting[a] and on_b)
                or (dfa_b.accepting[b] and on_a)
                or not (dfa_a.accepting[a] and dfa_b.accepting[b])
            ):
                return PREFIX
            equal = True
        both = (na >= 0) & (nb >= 0)
        both[both] = la[na[both]] & lb[nb[both]]
        for pair in set(zip(na[both].tolist(), nb[both].tolist())):
            if pair not in seen:
                if len(seen) >= MAX_PAIRS:
                    return PREFIX  # too large to decide: refuse rather than guess
                seen.add(pair)
                todo.append(pair)
    return EQUAL if equal else None


def _live(dfa, cache: dict, name: str) -> np.ndarray:
    """bool [states]: the states from which an accepting state is reachable."""
    if name not in cache:
        table = dfa.transitions
        src, byte = np.nonzero(table >= 0)
        cache[name] = closure_back(np.asarray(dfa.accepting, dtype=bool).copy(), src, table[src, byte].astype(np.int64))
    return cache[name]
