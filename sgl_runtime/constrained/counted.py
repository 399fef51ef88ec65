"""Byte automata with a counter: a path is accepted when it ends in an accepting state having
taken between `lo` and `hi` counted transitions (e.g. a JSON string of 1 to 2048 characters,
where the transition completing each decoded character counts).

`CountedDFA(table, counted, initial, accepting, lo, hi)` keeps only the small uncounted automaton
and, for each state, the numbers of counted transitions that lead from it to acceptance: the
sets S_L of states that accept after exactly L counted transitions are computed level by level
until they repeat (or L passes `hi`), so the counts that reach acceptance are known exactly for
any bound, e.g. maxLength 2**31, without building one state per count.

`CountedSlot(dfa, token_type)` is a lexer slot over it (grammar/lexer.py): its states are
(automaton state, count) pairs numbered as they are first reached, and only those from which a
count in [lo, hi] is still reachable exist, so every state is live; `fold` keeps the states a long
string is read through few (a count outside them is carried beside the state: GrammarState.shift).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sgl_runtime.constrained.byte_dfa import byte_classes
from sgl_runtime.constrained.errors import ConstraintError

MAX_LEVELS = 100_000  # levels computed before the level sets must have repeated


class CountedDFA:
    """The uncounted automaton, its counted transitions and the count bounds (see the module)."""

    def __init__(
        self,
        table: np.ndarray,
        counted: np.ndarray,
        initial: int,
        accepting: np.ndarray,
        lo: int,
        hi: Optional[int],
    ) -> None:
        self.table = np.ascontiguousarray(table, dtype=np.int32)  # [m, 256], -1 dead
        self.counted = np.asarray(counted, dtype=bool) & (self.table >= 0)  # [m, 256]
        self.initial = int(initial)
        self.accepting = np.asarray(accepting, dtype=bool)  # [m]
        self.lo, self.hi = int(lo), (None if hi is None else int(hi))
        if self.lo < 0 or (self.hi is not None and self.hi < self.lo):
            raise ConstraintError(f"counted automaton: bad count bounds [{lo}, {hi}]")
        self.levels, self.period = self._levels()
        self._first: dict = {}
        self._longest: Optional[int] = None
        self._most: Optional[np.ndarray] = None
        self._steps: Optional[np.ndarray] = None

    @property
    def transitions(self) -> np.ndarray:
        """The uncounted byte table (ByteDFA's name for it)."""
        return self.table

    def is_empty(self) -> bool:
        return not self.live(self.initial, 0)

    def live(self, state: int, count: int) -> bool:
        """Whether acceptance with a total count in [lo, hi] is reachable from (state, count)."""
        first = self.first_level(state, max(self.lo - count, 0))
        return first is not None and (self.hi is None or first <= self.hi - count)

    def accepts(self, data: bytes) -> bool:
        state, count = self.initial, 0
        for b in data:
            nxt = int(self.table[state, b])
            if nxt < 0:
                return False
            count += int(self.counted[state, b])
            state = nxt
        return bool(self.accepting[state]) and self.lo <= count and (self.hi is None or count <= self.hi)

    def longest_completion(self) -> int:
        """The most counted transitions any live state needs, at least, to accept."""
        if self._longest is None:
            hit = self.levels.any(axis=0)
            self._longest = int(self.levels.argmax(axis=0)[hit].max(initial=0))
        return self._longest

    def most_to_accept(self, state: int) -> Optional[int]:
        """The most counted transitions on any path from `state` that can still accept (None:
        unbounded, a cycle lies on such a path). Past lo, a count with at least this much room
        below hi behaves like lo: no path from there can reach hi."""
        if self._most is None:
            self._most = self._most_counts()
        most = int(self._most[state])
        return None if most < 0 else most

    def first_level(self, state: int, at_least: int) -> Optional[int]:
        """The smallest L >= at_least such that `state` accepts after exactly L counted
        transitions (None: none)."""
        key = (state, at_least)
        if key not in self._first:
            self._first[key] = self._first_level(state, at_least)
        return self._first[key]

    @property
    def steps(self) -> np.ndarray:
        """The automaton as one flat int32 table (`packed_steps`), built on first use."""
        if self._steps is None:
            self._steps = packed_steps(self.table, self.counted)
        return self._steps

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_first": {}, "_steps": None}

    def _most_counts(self) -> np.ndarray:
        """int64 [m]: most_to_accept per state, -1 for unbounded (or no accept reachable)."""
        m = self.table.shape[0]
        src, byte = np.nonzero(self.table >= 0)
        dst = self.table[src, byte].astype(np.int64)
        useful = closure_back(self.accepting.copy(), *state_pairs(src, dst, m))  # states that reach an accept
        keep = useful[src] & useful[dst]
        pairs, which = np.unique(src[keep] * m + dst[keep], return_inverse=True)  # one edge per state pair
        weight = np.zeros(len(pairs), dtype=np.int64)  # counted if any byte between them counts
        np.maximum.at(weight, which.ravel(), self.counted[src[keep], byte[keep]].astype(np.int64))
        succ: list = [[] for _ in range(m)]
        for a, b, c in zip((pairs // m).tolist(), (pairs % m).tolist(), weight.tolist()):
            succ[a].append((b, c))
        most = np.full(m, -2, dtype=np.int64)  # -2 unseen, -3 on the current path, -1 unbounded
        for root in np.flatnonzero(useful).tolist():
            if most[root] != -2:
                continue
            most[root] = -3
            stack = [(root, iter(succ[root]))]
            while stack:
                state, edges = stack[-1]
                for nxt, _ in edges:
                    if most[nxt] == -2:
                        most[nxt] = -3
                        stack.append((nxt, iter(succ[nxt])))
                        break
                    if most[nxt] == -3:
                        most[state] = -1  # a cycle through a useful state: unbounded
                else:
                    stack.pop()
                    if most[state] == -1:
                        continue
                    best = 0
                    for nxt, c in succ[state]:
                        if most[nxt] < 0:
                            best = -1
                            break
                        best = max(best, int(most[nxt]) + c)
                    most[state] = best
        most[most < 0] = -1
        return most

    # ---- private --------------------------------------------------------------------------

    def _first_level(self, state: int, at_least: int) -> Optional[int]:
        column = self.levels[:, state]
        n = len(column)
        if at_least < n:
            hits = np.flatnonzero(column[at_least:])
            if hits.size:
                return at_least + int(hits[0])
        if self.period is None:
            return None  # the levels stop at hi
        start, size = self.period  # levels[start:start + size] repeat forever
        residues = np.flatnonzero(column[start:])
        if not residues.size:
            return None
        q, r = divmod(max(at_least, n) - start, size)
        later = residues[residues >= r]
        return start + q * size + int(later[0] if later.size else size + residues[0])

    def _levels(self) -> tuple:
        """(bool [n_levels, m]: S_0, S_1, ..., (start, size) of their cycle or None when they
        stop at hi)."""
        m = self.table.shape[0]
        src, byte = np.nonzero(self.table >= 0)
        dst = self.table[src, byte].astype(np.int64)
        counted = self.counted[src, byte]
        free = state_pairs(src[~counted], dst[~counted], m)
        step = state_pairs(src[counted], dst[counted], m)
        level = closure_back(self.accepting.copy(), *free)
        seen: dict = {}
        out = []
        while True:
            key = level.tobytes()
            if key in seen:
                return np.array(out), (seen[key], len(out) - seen[key])
            if self.hi is not None and len(out) > self.hi:
                return np.array(out), None
            if len(out) >= MAX_LEVELS:
                raise ConstraintError(f"counted automaton: no period within {MAX_LEVELS} counts")
            seen[key] = len(out)
            out.append(level)
            before = np.zeros(m, dtype=bool)
            before[step[0][level[step[1]]]] = True
            level = closure_back(before, *free)


def packed_steps(trans: np.ndarray, counted: Optional[np.ndarray]) -> np.ndarray:
    """An automaton's transitions [m, 256] (-1 dead) and counted flags as one flat int32 table, read
    at `(state << 8) | byte`: 2 * next state, plus 1 where the transition is counted. A dead
    transition leads to the sink row m, which leads to itself and counts nothing."""
    m = trans.shape[0]
    if (m + 1) * 256 * 2 > np.iinfo(np.int32).max:  # far past any state budget
        raise ConstraintError(f"automaton of {m} states: too large for a packed step table")
    steps = np.empty((m + 1, 256), dtype=np.int32)
    steps[:m] = np.where(trans >= 0, trans * 2, 2 * m)
    if counted is not None:
        steps[:m] += (counted & (trans >= 0)).astype(np.int32)
    steps[m] = 2 * m
    return steps.ravel()


def state_pairs(src: np.ndarray, dst: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (src, dst) pairs of byte edges between `m` states (many bytes, one pair:
    closures over the pairs pass over a few percent of the byte edges)."""
    key = np.unique(src.astype(np.int64) * m + dst)
    return key // m, key % m


def closure_back(states: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """`states` plus every state reaching one of them through the edges src -> dst."""
    while True:
        add = states[dst] & ~states[src]
        if not add.any():
            return states
        states[src[add]] = True


class CountedSlot:
    """A lexer slot over a CountedDFA, built lazily (see the module docstring). `trans[q]`,
    `label[q]` and `live[q]` read like the tables of an eager slot (grammar/slots.SlotDFA)."""

    def __init__(self, dfa: CountedDFA, token_type: int) -> None:
        if dfa.is_empty():
            raise ConstraintError("counted automaton: empty language")
        self.dfa, self.token_type = dfa, token_type
        self._index: dict = {}
        self._keys: list = []
        self._rows: list = []
        self._by_state: dict = {}
        self.initial = self._intern(dfa.initial, 0)
        self.trans = _Lookup(self._row)
        self.label = _Lookup(self._label)
        self.live = _Lookup(lambda q: any(t >= 0 for t in self._row(q)))
        self._classes: Optional[np.ndarray] = None
        self._accepts_last = not (dfa.table[dfa.accepting] >= 0).any()  # accepting states end the slot

    def byte_class_of(self) -> np.ndarray:
        """Per byte, its class among the bytes this slot tells apart (alike in both the table and
        the counted flags)."""
        if self._classes is None:
            self._classes = byte_classes(np.concatenate([self.dfa.table, self.dfa.counted.astype(np.int32)]))[1]
        return self._classes

    def fold(self, q: int, shift: int, horizon: Optional[int]) -> tuple[int, int]:
        """(q', shift') for the position at `q`'s automaton state and its count plus `shift`: q' at a
        count that every path of at most `horizon` bytes follows alike (same events, same liveness),
        shift' the true count less q''s, so a long string is read through few states and most of its
        positions mask alike (None: the exact position, shift' 0):
        - past lo, (state, lo) for a count whose slack below hi covers `horizon` counted characters
          plus the longest completion, or every path from the state (most_to_accept: a pattern of
          bounded length, such as a UUID under a maxLength of 47, never meets hi);
        - below lo, (state, count mod period) for a count that `horizon` characters cannot carry
          to lo nor into the levels before their cycle: what lies ahead of such a count depends on
          it only through the cycle of the levels (CountedDFA.first_level), e.g. a minLength of
          1,000 is one mask until the last `horizon` characters before it."""
        state, count = self._keys[q]
        count += shift
        rep = count if horizon is None else self._representative_count(state, count, horizon)
        return self._intern(state, rep), count - rep

    def _representative_count(self, state: int, count: int, horizon: int) -> int:
        d = self.dfa
        if count < d.lo:
            if d.period is None:
                return count
            start, size = d.period
            if count + horizon + max(start, 1) > d.lo or count < size:
                return count
            return count % size
        if d.hi is None or count == d.lo:
            return count
        most = d.most_to_accept(state)
        if count + horizon + d.longest_completion() > d.hi and (most is None or count + most > d.hi):
            return count
        return d.lo

    def cut(self, q: int) -> Optional[tuple]:
        """(base, state, slack) when `q` is (state, count) past lo with an upper bound whose paths
        behave as the base's, (state, lo), except that a path dies once it needs more than `slack`
        (hi - count) counted transitions: past lo a pair (s, c) is live iff first_level(s, 0) <=
        hi - c (`needs` below). Only where accepting states end the slot (a JSON string's closing
        quote), so no path can fall back to an earlier accept. None elsewhere."""
        state, count = self._keys[q]
        d = self.dfa
        if d.hi is None or count <= d.lo or not self._accepts_last:
            return None
        return self._intern(state, d.lo), state, d.hi - count

    def needs(self, state: int, trie) -> np.ndarray:
        """int64 [tokens]: per token of `trie`'s vocabulary (grammar/token_trie.TokenTrie), the most counted transitions
        that some prefix of it read from `state` needs to stay live, max over its bytes inside the
        slot of (count so far + first_level(state there, 0)); a token is live from (state, c) past
        lo iff its need is at most hi - c. Walked over the token trie, every level whole: a node's
        value is its parent's, raised by its own byte where the automaton is still alive there."""
        d = self.dfa
        m = d.table.shape[0]
        first = np.array([_or(d.first_level(s, 0), 1 << 40) for s in range(m)] + [0], dtype=np.int64)
        steps = d.steps
        node_need = np.empty(trie.n_nodes, dtype=np.int64)
        st = np.array([state], dtype=np.int32)  # the root's state, count and need, as a level of one node
        got = np.zeros(1, dtype=np.int64)
        need = first[st]
        for level, byte in enumerate(trie.byte32):
            parent = trie.parent[level] if level else np.zeros(byte.size, dtype=np.int64)
            st, got, need = np.take(st, parent), np.take(got, parent), np.take(need, parent)
            step = np.take(steps, (st << 8) | byte)
            st = step >> 1
            got = got + (step & 1)  # a dead path's steps (the sink row) count nothing
            need = np.where(st < m, np.maximum(need, got + np.take(first, st)), need)
            node_need[trie.level_start[level] : trie.level_start[level] + byte.size] = need
        out = np.zeros(trie.vocab_size, dtype=np.int64)
        out[trie.sorted_rows] = node_need[trie.end_node]
        return out

    def position(self, q: int) -> tuple[int, int]:
        """(automaton state, count) of slot state `q`."""
        return self._keys[q]

    def state_at(self, state: int, count: int) -> int:
        """The slot state at (automaton state, count), which must be live."""
        return self._intern(state, count)

    def reach_bits(self, q: int) -> int:
        """The token types some continuation from `q` closes with (every state is live)."""
        return 1 << self.token_type

    def _intern(self, state: int, count: int) -> int:
        key = (state, count)
        q = self._index.get(key)
        if q is None:
            q = self._index[key] = len(self._keys)
            self._keys.append(key)
            self._rows.append(None)
        return q

    def _label(self, q: int) -> int:
        state, count = self._keys[q]
        return self.token_type if self.dfa.accepting[state] and count >= self.dfa.lo else -1

    def _row(self, q: int) -> list:
        row = self._rows[q]
        if row is None:
            row = self._rows[q] = self._build_row(*self._keys[q])
        return row

    def _build_row(self, state: int, count: int) -> list:
        d = self.dfa
        row = [-1] * 256
        for nxt, c, on in self._moves(state):
            total = count + c
            if d.hi is None:
                total = min(total, d.lo)  # counts past lo all behave alike without an upper bound
            elif total > d.hi:
                continue
            if d.live(nxt, total):
                q = self._intern(nxt, total)
                for b in on:
                    row[b] = q
        return row

    def _moves(self, state: int) -> list:
        """[(next automaton state, counted?, the bytes that go there)] from `state`, the same at
        every count (cached per state)."""
        moves = self._by_state.get(state)
        if moves is None:
            targets = self.dfa.table[state].astype(np.int64)
            codes = targets * 2 + self.dfa.counted[state]
            moves = self._by_state[state] = [
                (*divmod(code, 2), np.flatnonzero(codes == code).tolist())
                for code in np.unique(codes[targets >= 0]).tolist()
            ]
        return moves


def _or(value: Optional[int], default: int) -> int:
    return default if value is None else value


class _Lookup:
    """`obj[q]` computed by a function (a lazy table)."""

    __slots__ = ("_fn",)

    def __init__(self, fn) -> None:
        self._fn = fn

    def __getitem__(self, q: int):
        return self._fn(q)
