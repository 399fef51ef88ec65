"""Character-level DFAs shared by the regular constraints (regex, JSON Schema, structural tags):
partitions, Hopcroft minimization and conversion from/to interegular's FSM.

A `Dfa` is a list of per-state edges labelled with `Charset`s (disjoint within a state),
state 0 initial, missing transitions going to an implicit dead state. The operations that
combine Dfas (automata_ops) always return minimal Dfas.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from interegular.fsm import FSM, Alphabet, anything_else

from sgl_runtime.constrained.errors import ConstraintError

MAX_STATES = 200_000  # hard bound on the states of any intermediate automaton
BUDGET_EXCEEDED = "JSON Schema too complex: compiling it needs more than"  # how a work_budget error begins


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
        if pos.chars.isdisjoint(neg.chars):  # not copied: a class of \p{L}'s 140,000 characters less a few others
            return pos
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

    def __hash__(self) -> int:  # computed once: Dfas key the memo of automata_memo
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.edges, self.finals))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> dict:  # string hashes differ between processes: the cached one stays here
        return {"edges": self.edges, "finals": self.finals}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

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
        other_key = tuple(i for i, cs in enumerate(distinct) if cs.negated)
        if len(mentioned) > _REFINE_ABOVE:
            groups = _groups_by_refinement(distinct, mentioned)
        else:
            groups = _groups_by_char(distinct, mentioned)
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


_REFINE_ABOVE = 20_000  # mentioned characters past which blocks are split by set operations


def _groups_by_char(distinct: list[Charset], mentioned: set) -> dict:
    """Signature (indices of the charsets containing it) -> characters, one character at a time."""
    sig: dict = {c: [] for c in mentioned}
    for i, cs in enumerate(distinct):
        for c in (mentioned - cs.chars) if cs.negated else cs.chars:
            sig[c].append(i)
    groups: dict = defaultdict(set)
    for c, s in sig.items():
        groups[tuple(s)].add(c)
    return groups


def _groups_by_refinement(distinct: list[Charset], mentioned: set) -> dict:
    """The same groups, splitting blocks by each charset in turn (set operations in C: a Unicode
    property class lists ~100,000 characters, too many for a loop per character)."""
    blocks: list[tuple[set, tuple]] = [(set(mentioned), ())]
    for i, cs in enumerate(distinct):
        refined = []
        for chars, key in blocks:
            listed = chars & cs.chars
            if not listed:
                refined.append((chars, key + (i,) if cs.negated else key))
                continue
            chars -= listed  # in place: costs the size of the listed part only
            inside, outside = (chars, listed) if cs.negated else (listed, chars)
            for part, part_key in ((inside, key + (i,)), (outside, key)):
                if part:
                    refined.append((part, part_key))
        blocks = refined
    return {key: chars for chars, key in blocks}


def _charsets_of(dfas: Iterable[Dfa]) -> list[Charset]:
    return [cs for d in dfas for edges in d.edges for cs, _ in edges]


_WORK_LEFT: contextvars.ContextVar = contextvars.ContextVar("json_schema_work_left", default=None)


@contextlib.contextmanager
def work_budget(states: int):
    """Bounds the total automaton states built (in this context) while compiling one schema."""
    token = _WORK_LEFT.set([states, states])
    try:
        yield
    finally:
        _WORK_LEFT.reset(token)


def work_left() -> tuple[int, int] | None:
    """(states left, states in all) of the innermost `work_budget`, None outside one."""
    left = _WORK_LEFT.get()
    return None if left is None else (left[0], left[1])


def _check_size(n: int, what: str) -> None:
    if n > MAX_STATES:
        raise ConstraintError(f"JSON Schema automaton too large ({what} exceeds {MAX_STATES} states)")
    charge(1)


_CHARGED = threading.local()  # per thread: states charged so far (automata_memo replays an operation's charge)


def charge(states: int) -> None:
    """Counts `states` against the innermost `work_budget` (ConstraintError past it)."""
    _CHARGED.n = getattr(_CHARGED, "n", 0) + states
    left = _WORK_LEFT.get()
    if left is not None:
        left[0] -= states
        if left[0] < 0:
            raise ConstraintError(f"{BUDGET_EXCEEDED} {left[1]} automaton states in total (raise max_work_states)")


def charged() -> int:
    """States this thread has charged so far (see charge)."""
    return getattr(_CHARGED, "n", 0)


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
