"""Character-level DFA algebra used by the JSON Schema compiler.

A `Dfa` is a list of per-state edges labelled with `Charset`s (disjoint within a state),
state 0 initial, missing transitions going to an implicit dead state. Operations
(concatenation, union, repetition, intersection, difference) build an NFA or a product,
then determinize and minimize (Hopcroft) over the character classes involved, so the
result is always a minimal DFA. `to_interegular` converts the result to interegular's FSM.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from interegular.fsm import FSM, Alphabet, anything_else

from sgl_runtime.constrained.errors import ConstraintError

MAX_STATES = 200_000  # hard bound on the states of any intermediate automaton


@dataclass(frozen=True)
class Charset:
    """A set of characters: `chars` itself, or (negated) every character except `chars`."""

    chars: frozenset
    negated: bool = False

    def __contains__(self, c: str) -> bool:
        return (c in self.chars) != self.negated

    def __invert__(self) -> "Charset":
        return Charset(self.chars, not self.negated)

    def __or__(self, other: "Charset") -> "Charset":
        if not self.negated and not other.negated:
            return Charset(self.chars | other.chars)
        if self.negated and other.negated:
            return Charset(self.chars & other.chars, True)
        neg, pos = (self, other) if self.negated else (other, self)
        return Charset(neg.chars - pos.chars, True)

    def __and__(self, other: "Charset") -> "Charset":
        if not self.negated and not other.negated:
            return Charset(self.chars & other.chars)
        if self.negated and other.negated:
            return Charset(self.chars | other.chars, True)
        neg, pos = (self, other) if self.negated else (other, self)
        return Charset(pos.chars - neg.chars)

    def __sub__(self, other: "Charset") -> "Charset":
        return self & ~other

    def is_empty(self) -> bool:
        return not self.negated and not self.chars


def charset(chars: Iterable[str]) -> Charset:
    return Charset(frozenset(chars))


ANY_CHAR = Charset(frozenset(), True)


@dataclass(frozen=True)
class Dfa:
    """edges[s] = [(Charset, target), ...]; state 0 is initial."""

    edges: tuple
    finals: frozenset

    @property
    def num_states(self) -> int:
        return len(self.edges)

    def is_empty(self) -> bool:
        return not self.finals

    def step(self, state: int, c: str) -> int | None:
        for cs, t in self.edges[state]:
            if c in cs:
                return t
        return None

    def accepts(self, text: str) -> bool:
        state: int | None = 0
        for c in text:
            state = self.step(state, c)
            if state is None:
                return False
        return state in self.finals


EMPTY = Dfa(((),), frozenset())
EPSILON = Dfa(((),), frozenset({0}))


def literal(text: str) -> Dfa:
    edges = tuple(((charset(c), i + 1),) for i, c in enumerate(text)) + ((),)
    return Dfa(edges, frozenset({len(text)}))


def char_dfa(cs: Charset) -> Dfa:
    if cs.is_empty():
        return EMPTY
    return Dfa((((cs, 1),), ()), frozenset({1}))


# ----------------------------------------------------------------------------- partition

class _Partition:
    """Splits all characters into classes so every given charset is a union of classes."""

    def __init__(self, charsets: Iterable[Charset]):
        distinct = list(dict.fromkeys(charsets))
        mentioned: set = set()
        for cs in distinct:
            mentioned |= cs.chars
        sig: dict = {c: [] for c in mentioned}
        other_sig = []
        for i, cs in enumerate(distinct):
            if cs.negated:
                other_sig.append(i)
                for c in mentioned - cs.chars:
                    sig[c].append(i)
            else:
                for c in cs.chars:
                    sig[c].append(i)
        other_key = tuple(other_sig)
        groups: dict = defaultdict(set)
        for c, s in sig.items():
            groups[tuple(s)].add(c)
        explicit = set()
        self.classes: list[Charset] = []
        keys = []
        for key, chars in groups.items():
            if key == other_key:
                continue
            explicit |= chars
            self.classes.append(Charset(frozenset(chars)))
            keys.append(key)
        self.classes.append(Charset(frozenset(explicit), True))
        keys.append(other_key)
        self.other = len(self.classes) - 1
        members: dict = defaultdict(list)
        for cid, key in enumerate(keys):
            for i in key:
                members[i].append(cid)
        self.members = {cs: tuple(members[i]) for i, cs in enumerate(distinct)}
        self._merge_memo: dict = {}
        self.char_class = {c: cid for cid, cs in enumerate(self.classes[:-1]) for c in cs.chars}

    def table(self, dfa: Dfa) -> list[dict]:
        return [{cid: t for cs, t in edges for cid in self.members[cs]} for edges in dfa.edges]

    def edges_from_table(self, row: dict) -> tuple:
        by_target: dict = defaultdict(list)
        for cid, t in row.items():
            by_target[t].append(cid)
        return tuple((self._merged(tuple(cids)), t) for t, cids in by_target.items())

    def _merged(self, cids: tuple) -> Charset:
        got = self._merge_memo.get(cids)
        if got is None:
            got = self.classes[cids[0]]
            for c in cids[1:]:
                got = got | self.classes[c]
            self._merge_memo[cids] = got
        return got


def _charsets_of(dfas: Iterable[Dfa]) -> list[Charset]:
    return [cs for d in dfas for edges in d.edges for cs, _ in edges]


def _check_size(n: int, what: str) -> None:
    if n > MAX_STATES:
        raise ConstraintError(f"JSON Schema automaton too large ({what} exceeds {MAX_STATES} states)")


# ----------------------------------------------------------------------------- minimize

def _minimize(table: list[dict], finals: set, part: _Partition) -> Dfa:
    """Hopcroft's algorithm on a partial class table (missing = an implicit dead state)."""
    n, k = len(table), len(part.classes)
    _check_size(n, "automaton")
    dead = n
    inv: list[dict] = [defaultdict(list) for _ in range(n + 1)]
    for s, row in enumerate(table):
        for c, t in row.items():
            inv[t][c].append(s)
    missing: dict[int, list[int]] = {}

    def predecessors(splitter) -> dict:
        preds: dict = defaultdict(list)
        for t in splitter:
            if t != dead:
                for c, srcs in inv[t].items():
                    preds[c].extend(srcs)
                continue
            for c in range(k):
                if c not in missing:
                    missing[c] = [s for s in range(n) if c not in table[s]] + [dead]
                preds[c].extend(missing[c])
        return preds

    fin = set(finals)
    blocks = [b for b in (set(fin), set(range(n + 1)) - fin) if b]
    block_of = [0] * (n + 1)
    for i, b in enumerate(blocks):
        for s in b:
            block_of[s] = i
    work = [min(range(len(blocks)), key=lambda i: len(blocks[i]))] if len(blocks) == 2 else []
    in_work = set(work)
    while work:
        a = work.pop()
        in_work.discard(a)
        for members_by_c in predecessors(list(blocks[a])).values():
            touched: dict = defaultdict(list)
            for s in members_by_c:
                touched[block_of[s]].append(s)
            for b, members in touched.items():
                if len(members) == len(blocks[b]):
                    continue
                new = set(members)
                blocks[b] -= new
                nb = len(blocks)
                blocks.append(new)
                for s in new:
                    block_of[s] = nb
                if b in in_work or len(new) <= len(blocks[b]):
                    work.append(nb)
                    in_work.add(nb)
                else:
                    work.append(b)
                    in_work.add(b)
    return _trimmed(table, fin, part, block_of, dead)


def _trimmed(table: list[dict], fin: set, part: _Partition, block_of: list[int], dead: int) -> Dfa:
    """The quotient automaton, reachable blocks only, numbered breadth-first, dead block dropped."""
    dead_block = block_of[dead]
    if block_of[0] == dead_block:
        return EMPTY
    reps = {}
    for s in range(len(table) - 1, -1, -1):
        reps[block_of[s]] = s
    order = {block_of[0]: 0}
    queue = [block_of[0]]
    rows = []
    for blk in queue:
        row = {}
        for c, t in table[reps[blk]].items():
            tb = block_of[t]
            if tb == dead_block:
                continue
            if tb not in order:
                order[tb] = len(queue)
                queue.append(tb)
            row[c] = order[tb]
        rows.append(row)
    new_finals = frozenset(order[b] for b in queue if reps[b] in fin)
    return Dfa(tuple(part.edges_from_table(r) for r in rows), new_finals)


def minimize(dfa: Dfa) -> Dfa:
    part = _Partition(_charsets_of([dfa]))
    return _minimize(part.table(dfa), set(dfa.finals), part)


# ----------------------------------------------------------------------------- NFA

class Nfa:
    """An epsilon-NFA assembled from embedded Dfas; `determinize` yields a minimal Dfa."""

    def __init__(self) -> None:
        self.edges: list[list] = []
        self.eps: list[list[int]] = []
        self.finals: set[int] = set()

    def add_state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def add_eps(self, src: int, dst: int) -> None:
        self.eps[src].append(dst)

    def add_edge(self, src: int, cs: Charset, dst: int) -> None:
        if not cs.is_empty():
            self.edges[src].append((cs, dst))

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

        first = closure(frozenset({start}))
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
                key = closure(frozenset(targets))
                j = index.get(key)
                if j is None:
                    j = index[key] = len(subsets)
                    subsets.append(key)
                for c in cids:
                    row[c] = j
            table.append(row)
            _check_size(len(subsets), "subset construction")
        return _minimize(table, finals, part)


def concat(*dfas: Dfa) -> Dfa:
    if any(d.is_empty() for d in dfas):
        return EMPTY
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


def optional(dfa: Dfa) -> Dfa:
    return union(dfa, EPSILON)


# ----------------------------------------------------------------------------- products

def product(dfas: Sequence[Dfa], accept: Callable[[tuple], bool], alive: Callable[[tuple], bool],
            drivers: int | None = None) -> Dfa:
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
        classes = set()
        for s, tbl in zip(cur[:drivers], tables):
            if s is not None:
                classes.update(tbl[s])
        for c in classes:
            nxt = tuple(None if s is None else tbl[s].get(c) for s, tbl in zip(cur, tables))
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


def intersect(*dfas: Dfa) -> Dfa:
    if any(d.is_empty() for d in dfas):
        return EMPTY
    if len(dfas) == 1:
        return dfas[0]
    return product(dfas, all, lambda st: None not in st, drivers=1)


def difference(a: Dfa, *subtract: Dfa) -> Dfa:
    """Strings of `a` accepted by none of `subtract`."""
    subtract = tuple(d for d in subtract if not d.is_empty())
    if a.is_empty() or not subtract:
        return a
    return product((a,) + subtract, lambda acc: acc[0] and not any(acc[1:]), lambda st: st[0] is not None,
                   drivers=1)


def exactly_one(*dfas: Dfa) -> Dfa:
    """Strings accepted by exactly one of `dfas`."""
    dfas = tuple(d for d in dfas if not d.is_empty())
    if not dfas:
        return EMPTY
    if len(dfas) == 1:
        return dfas[0]
    return product(dfas, lambda acc: sum(acc) == 1, lambda st: any(s is not None for s in st))


# ----------------------------------------------------------------------------- interop

def to_interegular(dfa: Dfa) -> FSM:
    part = _Partition(_charsets_of([dfa]))
    mapping = dict(part.char_class)
    mapping[anything_else] = part.other
    table = part.table(dfa)
    return FSM(
        alphabet=Alphabet(mapping),
        states=set(range(dfa.num_states)),
        initial=0,
        finals=set(dfa.finals),
        map={s: dict(row) for s, row in enumerate(table)},
        __no_validation__=True,
    )


def from_interegular(fsm: FSM) -> Dfa:
    """Converts an interegular FSM (e.g. a parsed regex) to a minimal Dfa."""
    alphabet = fsm.alphabet
    explicit = frozenset(c for c in alphabet if c is not anything_else)
    key_cs = {}
    for key, symbols in alphabet.by_transition.items():
        chars = frozenset(c for c in symbols if c is not anything_else)
        if anything_else in symbols:
            key_cs[key] = Charset(explicit - chars, True)
        else:
            key_cs[key] = Charset(chars)
    order = {fsm.initial: 0}
    queue = [fsm.initial]
    edges = []
    for s in queue:
        row = []
        for key, t in fsm.map.get(s, {}).items():
            if t not in order:
                order[t] = len(queue)
                queue.append(t)
            row.append((key_cs[key], order[t]))
        edges.append(tuple(row))
    return minimize(Dfa(tuple(edges), frozenset(order[s] for s in queue if s in fsm.finals)))


# ----------------------------------------------------------------------------- sampling

_SAMPLE_POOL = "abcxyzABZ019 _-.:/@#\"\\\n\t\x01é中😀"


def sample(dfa: Dfa, rng, max_len: int = 200, stop_prob: float = 0.3) -> str | None:
    """A random string accepted by `dfa` (None if it accepts nothing); for tests and fuzzing.

    Walks random edges, stopping at a final state with probability `stop_prob`; past
    `max_len` characters it follows a shortest path to a final state."""
    if dfa.is_empty():
        return None
    dist = _distance_to_final(dfa)
    state, out = 0, []
    while True:
        if state in dfa.finals and (rng.random() < stop_prob or not dfa.edges[state]):
            return "".join(out)
        edges = dfa.edges[state]
        if len(out) >= max_len:
            edges = [e for e in edges if dist.get(e[1], 1 << 30) < dist[state]] or edges
            if state in dfa.finals:
                return "".join(out)
        cs, target = edges[rng.randrange(len(edges))]
        out.append(_sample_char(cs, rng))
        state = target


def _sample_char(cs: Charset, rng) -> str:
    if not cs.negated:
        return rng.choice(sorted(cs.chars))
    pool = [c for c in _SAMPLE_POOL if c in cs]
    return rng.choice(pool) if pool else next(chr(i) for i in range(0x21, 0x10000) if chr(i) in cs)


def _distance_to_final(dfa: Dfa) -> dict[int, int]:
    reverse: dict = defaultdict(list)
    for s, edges in enumerate(dfa.edges):
        for _, t in edges:
            reverse[t].append(s)
    dist = {f: 0 for f in dfa.finals}
    queue = list(dfa.finals)
    for s in queue:
        for p in reverse[s]:
            if p not in dist:
                dist[p] = dist[s] + 1
                queue.append(p)
    return dist
