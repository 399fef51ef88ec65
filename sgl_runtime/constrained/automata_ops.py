"""Operations combining Dfas: an epsilon-NFA with subset construction (concatenation, union,
bounded repetition) and synchronous products (intersection, difference, exactly-one)."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

from sgl_runtime.constrained.automata import (
    EMPTY,
    EPSILON,
    Dfa,
    _charsets_of,
    _check_size,
    _minimize,
    _Partition,
    literal,
)
from sgl_runtime.constrained.automata_memo import memoized


class Nfa:
    """An epsilon-NFA assembled from embedded Dfas; `determinize` yields a minimal Dfa."""

    def __init__(self) -> None:
        self.edges: list[list] = []
        self.eps: list[list[int]] = []
        self.finals: set[int] = set()
        self.copies: dict = {}  # state -> [(repeat, offset, copy)]: see undominated

    def add_state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def add_eps(self, src: int, dst: int) -> None:
        self.eps[src].append(dst)

    def embed(self, dfa: Dfa) -> tuple[int, list[int]]:
        """Copies `dfa` in; returns (its start state, its final states)."""
        base = len(self.edges)
        for edges in dfa.edges:
            self.edges.append([(cs, base + t) for cs, t in edges])
            self.eps.append([])
        _check_size(len(self.edges), "NFA")
        return base, [base + f for f in dfa.finals]

    def determinize_between(self, start: int, prefix: Dfa, suffix: Dfa) -> Dfa:
        """Determinizes prefix . (this NFA from `start`) . suffix in one pass."""
        old_finals, self.finals = self.finals, set()
        s0, ends = self.embed(prefix)
        for f in ends:
            self.add_eps(f, start)
        s1, ends = self.embed(suffix)
        for f in old_finals:
            self.add_eps(f, s1)
        self.finals = set(ends)
        return self.determinize(s0)

    def determinize(self, start: int) -> Dfa:
        part = _Partition(cs for edges in self.edges for cs, _ in edges)
        moves = [[(part.members[cs], t) for cs, t in edges] for edges in self.edges]
        disjoint = [sum(len(c) for c, _ in m) == len({x for c, _ in m for x in c}) for m in moves]
        closure_memo: dict = {}

        def closure(states: frozenset) -> frozenset:
            got = closure_memo.get(states)
            if got is None:
                seen, stack = set(states), list(states)
                while stack:
                    for t in self.eps[stack.pop()]:
                        if t not in seen:
                            seen.add(t)
                            stack.append(t)
                got = closure_memo[states] = frozenset(seen)
            return got

        universal = self._universal(moves, len(part.classes), closure)
        everything = None  # the one subset standing for all subsets that accept every continuation
        copies, pruned = self.copies, {}

        def subset(states: frozenset) -> frozenset:  # the closure less its dominated states: same language
            if not copies:
                return closure(states)
            got = pruned.get(states)
            if got is None:
                got = pruned[states] = undominated(closure(states), copies)
            return got

        first = subset(frozenset({start}))
        if universal and not first.isdisjoint(universal):
            everything = first
        index = {first: 0}
        subsets = [first]
        table: list[dict] = []
        finals = set()
        for i in range(10**9):
            if i >= len(subsets):
                break
            cur = subsets[i]
            if cur & self.finals:
                finals.add(i)
            movers = [s for s in cur if moves[s]]
            row = {}
            if len(movers) == 1 and disjoint[movers[0]]:
                groups = [(cids, (t,)) for cids, t in moves[movers[0]]]
            else:
                nxt: dict = defaultdict(set)
                for s in movers:
                    for cids, t in moves[s]:
                        for c in cids:
                            nxt[c].add(t)
                by_targets: dict = defaultdict(list)
                for c, targets in nxt.items():
                    by_targets[frozenset(targets)].append(c)
                groups = [(cids, targets) for targets, cids in by_targets.items()]
            for cids, targets in groups:
                key = subset(frozenset(targets))
                if universal and not key.isdisjoint(universal):
                    everything = key = everything or key
                j = index.get(key)
                if j is None:
                    j = index[key] = len(subsets)
                    subsets.append(key)
                for c in cids:
                    row[c] = j
            table.append(row)
            _check_size(len(subsets), "subset construction")
        return _minimize(table, finals, part)

    def _universal(self, moves: list, classes: int, closure) -> frozenset:
        """NFA states from which every continuation is accepted: the largest set of states whose
        closure holds a final state and moves on every character class into the set again (a
        trailing `.*`). A subset holding one accepts everything, so all such subsets are one DFA
        state; tracking the rest of each (e.g. counters still running after a searched pattern
        matched) would only make equivalent subsets, exponentially many of them."""
        back: dict = defaultdict(list)
        for q, targets in enumerate(self.eps):
            for t in targets:
                back[t].append(q)
        found, stack = set(self.finals), list(self.finals)  # the states whose closure holds a final
        while stack:
            for q in back.get(stack.pop(), ()):
                if q not in found:
                    found.add(q)
                    stack.append(q)
        changed = True
        while found and changed:
            changed = False
            for q in list(found):
                covered: set = set()
                for p in closure(frozenset({q})):
                    for cids, t in moves[p]:
                        if t in found:
                            covered.update(cids)
                if len(covered) < classes:
                    found.discard(q)
                    changed = True
        return frozenset(found)


def undominated(states: frozenset, copies: dict, tagged: bool = False) -> frozenset:
    """`states` less those another state of it dominates: `copies` maps the states of the optional
    copies of an unrolled bounded repeat X{m,n} to (repeat, offset in the copy, copy number), and
    copy k's state at an offset accepts every continuation that a later copy's state at the same
    offset accepts (the same rest of X, then fewer copies left), so the subset's language is the
    same without the later one. Without this, a counted class after a varying prefix (`.*/[a-z]{1,64}`)
    makes a subset for every set of copies alive at once. `tagged`: the items are (state, obligations)
    and only items with equal obligations dominate each other (regex_automaton's guards)."""
    best: dict = {}
    for item in states:
        q, tag = item if tagged else (item, None)
        for repeat, offset, copy in copies.get(q, ()):
            key = (repeat, offset, tag)
            if best.get(key, copy + 1) > copy:
                best[key] = copy
    if not best:
        return states
    out = []
    for item in states:
        q, tag = item if tagged else (item, None)
        if all(best[(repeat, offset, tag)] == copy for repeat, offset, copy in copies.get(q, ())):
            out.append(item)
    return states if len(out) == len(states) else frozenset(out)


@memoized
def concat(*dfas: Dfa) -> Dfa:
    if any(d.is_empty() for d in dfas):
        return EMPTY
    texts = [_literal_text(d) for d in dfas]
    if dfas and all(t is not None for t in texts):  # literals (keys, punctuation): one chain
        return literal("".join(texts))  # type: ignore[arg-type]
    nfa = Nfa()
    start = prev_finals = None
    for d in dfas:
        s, fs = nfa.embed(d)
        if start is None:
            start = s
        else:
            for f in prev_finals:
                nfa.add_eps(f, s)
        prev_finals = fs
    if start is None:
        return EPSILON
    nfa.finals.update(prev_finals)
    return nfa.determinize(start)


def _literal_text(dfa: Dfa) -> str | None:
    """The one string `dfa` accepts when it is a chain of single characters (as `literal` builds)."""
    n = dfa.num_states
    if dfa.finals != {n - 1} or dfa.edges[n - 1]:
        return None
    chars = []
    for i, edges in enumerate(dfa.edges[:-1]):
        if len(edges) != 1 or edges[0][1] != i + 1 or edges[0][0].negated or len(edges[0][0].chars) != 1:
            return None
        chars.append(next(iter(edges[0][0].chars)))
    return "".join(chars)


@memoized
def union(*dfas: Dfa) -> Dfa:
    dfas = tuple(d for d in dfas if not d.is_empty())
    if not dfas:
        return EMPTY
    if len(dfas) == 1:
        return dfas[0]
    nfa = Nfa()
    start = nfa.add_state()
    for d in dfas:
        s, fs = nfa.embed(d)
        nfa.add_eps(start, s)
        nfa.finals.update(fs)
    return nfa.determinize(start)


def repeat(dfa: Dfa, lo: int, hi: int | None, sep: Dfa | None = None) -> Dfa:
    """`dfa` repeated lo..hi times (hi None = unbounded), with `sep` between repetitions."""
    if hi is not None and hi < lo:
        return EMPTY
    if hi == 0 or dfa.is_empty():
        return EPSILON if lo == 0 else EMPTY
    later = concat(sep, dfa) if sep is not None else dfa
    nfa = Nfa()
    start = nfa.add_state()
    if lo == 0:
        nfa.finals.add(start)
    s, ends = nfa.embed(dfa)
    nfa.add_eps(start, s)
    count = 1
    if count >= lo:
        nfa.finals.update(ends)
    while hi is None or count < hi:
        if hi is None and count >= lo:
            hub = nfa.add_state()
            for e in ends:
                nfa.add_eps(e, hub)
            s, fs = nfa.embed(later)
            nfa.add_eps(hub, s)
            for f in fs:
                nfa.add_eps(f, hub)
            nfa.finals.add(hub)
            break
        s, fs = nfa.embed(later)
        for e in ends:
            nfa.add_eps(e, s)
        ends = fs
        count += 1
        if count >= lo:
            nfa.finals.update(ends)
    return nfa.determinize(start)


def up_to(dfa: Dfa, n: int) -> Dfa:
    """`dfa` repeated 0..n times, built from the right and minimal at each step (R = ε | dfa·R). For a
    body whose strings differ in length (`(.|-+)?[a-z]`) the subset construction of an unrolled NFA
    tracks every iteration count at once, cubic in n; this is quadratic."""
    result = EPSILON
    for _ in range(n):
        nfa = Nfa()
        start = nfa.add_state()
        nfa.finals.add(start)
        s, ends = nfa.embed(dfa)
        nfa.add_eps(start, s)
        r, r_finals = nfa.embed(result)
        for e in ends:
            nfa.add_eps(e, r)
        nfa.finals.update(r_finals)
        longer = nfa.determinize(start)
        if longer == result:  # a fixpoint (the body's language is closed under repetition)
            break
        result = longer
    return result


def optional(dfa: Dfa) -> Dfa:
    return union(dfa, EPSILON)


# ----------------------------------------------------------------------------- products

_NO_MOVES: dict = {}


def product(
    dfas: Sequence[Dfa], accept: Callable[[tuple], bool], alive: Callable[[tuple], bool], drivers: int | None = None
) -> Dfa:
    """Runs `dfas` in parallel; a tuple of states (None = dead) is final when `accept(bools)`.

    Only classes on which one of the first `drivers` automata moves are explored (a tuple is
    dead whenever those automata all are)."""
    drivers = len(dfas) if drivers is None else drivers
    part = _Partition(_charsets_of(dfas))
    tables = [part.table(d) for d in dfas]
    finals_of = [d.finals for d in dfas]
    first = tuple(0 for _ in dfas)
    index = {first: 0}
    states = [first]
    table: list[dict] = []
    finals = set()
    for i in range(10**9):
        if i >= len(states):
            break
        cur = states[i]
        if accept(tuple(s is not None and s in f for s, f in zip(cur, finals_of))):
            finals.add(i)
        row = {}
        rows = [_NO_MOVES if s is None else tbl[s] for s, tbl in zip(cur, tables)]
        classes = set()
        for r in rows[:drivers]:
            classes.update(r)
        pair = rows if len(rows) == 2 else None
        for c in classes:
            nxt = (pair[0].get(c), pair[1].get(c)) if pair else tuple(r.get(c) for r in rows)
            if not alive(nxt):
                continue
            j = index.get(nxt)
            if j is None:
                j = index[nxt] = len(states)
                states.append(nxt)
            row[c] = j
        table.append(row)
        _check_size(len(states), "product")
    return _minimize(table, finals, part)


@memoized
def intersect(*dfas: Dfa) -> Dfa:
    if any(d.is_empty() for d in dfas):
        return EMPTY
    if len(dfas) == 1:
        return dfas[0]
    return product(dfas, all, lambda st: None not in st, drivers=1)


@memoized
def difference(a: Dfa, *subtract: Dfa) -> Dfa:
    """Strings of `a` accepted by none of `subtract`."""
    subtract = tuple(d for d in subtract if not d.is_empty())
    if a.is_empty() or not subtract:
        return a
    return product((a,) + subtract, lambda acc: acc[0] and not any(acc[1:]), lambda st: st[0] is not None, drivers=1)


@memoized
def exactly_one(*dfas: Dfa) -> Dfa:
    """Strings accepted by exactly one of `dfas`."""
    dfas = tuple(d for d in dfas if not d.is_empty())
    if not dfas:
        return EMPTY
    if len(dfas) == 1:
        return dfas[0]
    return product(dfas, lambda acc: sum(acc) == 1, lambda st: any(s is not None for s in st))
