"""One contextual-lexer context of a lark LALR grammar as a product automaton over bytes.

Lark lexes with, per parser state, an ordered list of slots (terminal regexes); at each
position the FIRST slot in that order matching a non-empty prefix wins, and its match is the
longest (the greedy match of a terminal regex). A product state tracks, for the token being
read, every slot's DFA state, the current winner (first slot that has matched), the type at
the winner's last accepting position, whether the last byte was such a position, and whether
the token has started. Per (state, byte) the tables give the next state and an event:
CONTINUE, ACCEPT (winner matched here), CLOSE_BEFORE (every slot died: the token ended at the
winner's last accept and the bytes after it are lexed again), CLOSE_HERE (the winner cannot
grow and no earlier slot is alive: the token ends with this byte), DEAD (no token possible).
`possible[s]` is the bitset of token types some continuation can close the token with.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sgl_runtime.constrained.byte_dfa import byte_classes
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.slots import SlotDFA

CONTINUE, ACCEPT, CLOSE_BEFORE, CLOSE_HERE, DEAD = 0, 1, 2, 3, 4
FEW_LIVE = 8  # at most this many live bytes: few_live_bytes lists them


class LexerContext:
    """The product automaton of one lexer context. Its rows (next state, event and closed type per
    byte class) are all built at construction, except in a context with a counted slot (a long
    string), where a state's row is built when first needed (`ensure`, `build_row`); `possible`
    bits are computed when first asked. `rows[x]` (None until built) holds state x's (events, next
    states, closed types) per byte class, `class_list[byte]` the class of a byte."""

    def __init__(self, slots: list, max_states: int = 50_000) -> None:
        self.slots = slots
        self.n = len(slots)
        self._max_states = max_states
        self._reps, self.class_of = _byte_classes(slots)  # class_of: [256] byte -> byte class
        self.n_classes = len(self._reps)
        self._reps_list = self._reps.tolist()
        self.class_list = self.class_of.tolist()
        self._class_sizes = np.bincount(self.class_of, minlength=self.n_classes).tolist()
        self._class_bytes: Optional[list] = None  # per class, its bytes ascending (few_live_bytes builds it)
        lists = [s.as_lists() if isinstance(s, SlotDFA) else (s.trans, s.label, s.live) for s in slots]
        self._trans, self._label, self._live = (list(x) for x in zip(*lists)) if lists else ([], [], [])
        self._index: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        self.rows: list = []  # per state: (codes, next states, closed types) per class, or None (build_row)
        self.winner_of: list[int] = []  # per state: the winning slot so far (-1: none), as `winner`
        self._possible: dict[int, int] = {}
        self._few: dict[int, "bytes | None"] = {}  # few_live_bytes per state
        self._counted = any(hasattr(s, "fold") for s in slots)  # counted slots (long strings)
        self._lone: dict[int, int] = {}  # per state: its lone alive slot where that is counted, else -1
        self._grow(64)
        self.initial = self._intern((*[s.initial for s in slots], -1, -1, 0, 1))
        if not self._counted:
            self._explore()  # finite and usually small: every row now, none on the decode path

    slot_types: list = []  # each slot's token type (set by the engine)

    @property
    def n_states(self) -> int:
        return len(self._keys)

    def ensure(self, states: np.ndarray) -> bool:
        """Build the rows of `states` not built yet; whether any was (the row arrays may then have
        been reallocated: read `nxt`, `code`, `ctype` again)."""
        todo = states[~self.built[states]]
        if not todo.size:
            return False
        for x in np.unique(todo).tolist():
            self.build_row(x)
        return True

    def live_bytes(self, state: int) -> np.ndarray:
        """bool [256]: the bytes that do not kill the token from `state`."""
        if self.rows[state] is None:
            self.build_row(state)
        return self.code[state][self.class_of] != DEAD

    def possible(self, state: int) -> int:
        """Bitset of the token types some continuation from `state` can close the token with."""
        bits = self._possible.get(state)
        if bits is None:
            bits = self._possible[state] = self._compute_possible(state)
        return bits

    def fold(self, state: int, shift: int, horizon: Optional[int]) -> tuple[int, int]:
        """(state', shift') for `state` whose lone counted slot (a long string) has counted `shift`
        more than `state` says: state' at a count whose next `horizon` bytes behave exactly as the
        true count's (CountedSlot.fold; None: the true count), and the true count less state''s.
        Elsewhere, and once something has matched (the bytes after it may be lexed again from
        there), the exact state and 0."""
        if not self._counted:
            return state, 0
        i = self._lone.get(state)
        if i is None:
            alive = self.alive_slots(state)
            i = self._lone[state] = alive[0] if len(alive) == 1 and hasattr(self.slots[alive[0]], "fold") else -1
        if i < 0:
            return state, 0  # the count went with its slot (a slot never comes back to life)
        key = self._keys[state]
        q, shift = self.slots[i].fold(key[i], shift, None if key[self.n] >= 0 else horizon)
        return (state if q == key[i] else self._intern((*key[:i], q, *key[i + 1 :]))), shift

    def cut(self, state: int) -> tuple | None:
        """(base, slot, slot's automaton state, slack) where a lone counted slot's count is past
        its lower bound (CountedSlot.cut): `state` masks as `base` less the tokens whose need
        from that automaton state exceeds `slack`. None elsewhere."""
        if not self._counted:
            return None
        key = self._keys[state]
        alive = [i for i, q in enumerate(key[: self.n]) if q >= 0]
        if key[self.n] >= 0 or len(alive) != 1 or not hasattr(self.slots[alive[0]], "cut"):
            return None
        i = alive[0]
        found = self.slots[i].cut(key[i])
        if found is None:
            return None
        q, dfa_state, slack = found
        return self._intern((*key[:i], q, *key[i + 1 :])), i, dfa_state, slack

    def slot_state(self, state: int, slot: int) -> int:
        """The DFA state of `slot` in product state `state` (-1: that slot has died)."""
        return self._keys[state][slot]

    def alive_slots(self, state: int) -> list[int]:
        return [i for i, s in enumerate(self._keys[state][: self.n]) if s >= 0]

    def reading(self, slot: int, q: int) -> int:
        """The product state where only `slot` is alive, in state `q`, and nothing has matched
        yet (where a token that reads on inside that slot alone ends)."""
        return self._intern((*([-1] * slot), q, *([-1] * (self.n - slot - 1)), -1, -1, 0, 0))

    def few_live_bytes(self, state: int) -> "bytes | None":
        """The bytes that do not kill the token from `state`, ascending, where there are at most
        FEW_LIVE of them (inside a key or a literal: one); None where there are more."""
        found = self._few.get(state, False)
        if found is False:
            codes = (self.rows[state] or self.build_row(state))[0]
            live = [c for c, code in enumerate(codes) if code != DEAD]
            if sum(self._class_sizes[c] for c in live) > FEW_LIVE:
                found = None
            else:
                if self._class_bytes is None:
                    order = np.argsort(self.class_of, kind="stable").astype(np.uint8)
                    self._class_bytes = [p.tobytes() for p in np.split(order, np.cumsum(self._class_sizes)[:-1])]
                found = bytes(sorted(b"".join(self._class_bytes[c] for c in live)))
            self._few[state] = found
        return found

    def is_fresh(self, state: int) -> bool:
        return state == self.initial

    # ---- private: states and rows -----------------------------------------------------------

    def _explore(self) -> None:
        """Build the rows of every state reachable from the token start (numbered as `build_row`
        state by state would), visiting only the classes on which some slot is alive: inside a
        key or a literal one slot with one byte class goes on, the other classes all end alike."""
        n, n_classes = self.n, self.n_classes
        reps = self._reps
        succ: list[dict] = [{} for _ in range(n)]  # per slot: state -> [(class, next state)]
        codes, nxts, types = [], [], []
        x = 0
        while x < len(self._keys):
            key = self._keys[x]
            states, w, wtype = key[:n], key[n], key[n + 1]
            touched: dict[int, list] = {}
            for i, q in enumerate(states):
                if q >= 0:
                    out = succ[i].get(q)
                    if out is None:
                        row = self.slots[i].trans[q, reps]
                        live = np.flatnonzero(row >= 0)
                        out = succ[i][q] = list(zip(live.tolist(), row[live].tolist()))
                    for c, t in out:
                        d = touched.get(c)
                        if d is None:
                            d = touched[c] = [-1] * n
                        d[i] = t
            code = [CLOSE_BEFORE if w >= 0 else DEAD] * n_classes
            ctype = [wtype if w >= 0 else -1] * n_classes
            nxt = [-1] * n_classes
            for c in sorted(touched):
                code[c], nxt[c], ctype[c] = self._step(touched[c], w, wtype)
            codes.append(code)
            nxts.append(nxt)
            types.append(ctype)
            x += 1
        count = len(codes)
        self.code[:count], self.nxt[:count], self.ctype[:count] = codes, nxts, types
        self.built[:count] = True
        self.rows[:count] = list(zip(codes, nxts, types))

    def _step(self, d: list, w: int, wtype: int) -> tuple[int, int, int]:
        """(event, next state, closed type) when the slots go to states `d` (-1: dead) from a
        state whose winner so far is `w` of type `wtype`."""
        n = self.n
        new_w, new_type, accepted = w, wtype, False
        for i in range(n if w < 0 else w + 1):  # the first slot (in lark's order) matching here wins
            if d[i] >= 0 and self._label[i][d[i]] >= 0:
                new_w, new_type, accepted = i, self._label[i][d[i]], True
                break
        if new_w >= 0:
            d[new_w + 1 :] = [-1] * (n - new_w - 1)  # later slots can no longer win
        if all(s < 0 for s in d):
            return (CLOSE_BEFORE, -1, wtype) if w >= 0 else (DEAD, -1, -1)
        if accepted and all(s < 0 for s in d[:new_w]) and not self._live[new_w][d[new_w]]:
            return CLOSE_HERE, -1, new_type
        return (ACCEPT if accepted else CONTINUE), self._intern((*d, new_w, new_type, int(accepted), 0)), -1

    def _grow(self, capacity: int) -> None:
        old = len(self._keys)
        shape = (capacity, self.n_classes)
        nxt, code, ctype = np.full(shape, -1, np.int32), np.full(shape, DEAD, np.int8), np.full(shape, -1, np.int32)
        built = np.zeros(capacity, dtype=bool)
        winner, wtype, at_accept = (
            np.full(capacity, -1, np.int32),
            np.full(capacity, -1, np.int32),
            np.zeros(capacity, bool),
        )
        if old:
            nxt[:old], code[:old], ctype[:old], built[:old] = (
                self.nxt[:old],
                self.code[:old],
                self.ctype[:old],
                self.built[:old],
            )
            winner[:old], wtype[:old], at_accept[:old] = self.winner[:old], self.wtype[:old], self.at_accept[:old]
        self.nxt, self.code, self.ctype, self.built = nxt, code, ctype, built  # [S, classes], [S]
        self.winner, self.wtype, self.at_accept = winner, wtype, at_accept  # [S]

    def _intern(self, key: tuple) -> int:
        idx = self._index.get(key)
        if idx is None:
            idx = len(self._keys)
            if idx >= self._max_states:
                raise ConstraintError(f"grammar lexer context too large (> {self._max_states} states)")
            if idx >= len(self.built):
                self._grow(2 * len(self.built))
            self._index[key] = idx
            self._keys.append(key)
            self.rows.append(None)
            self.winner_of.append(key[self.n])
            self.winner[idx], self.wtype[idx], self.at_accept[idx] = key[self.n], key[self.n + 1], bool(key[self.n + 2])
        return idx

    def build_row(self, state: int) -> tuple:
        row = self._class_row(self._keys[state])  # may intern (and reallocate) first
        self.nxt[state], self.code[state], self.ctype[state] = row
        self.built[state] = True
        self.rows[state] = py = (row[1].tolist(), row[0].tolist(), row[2].tolist())  # code, next, type
        return py

    def _class_row(self, key: tuple):
        """Next state, event and closed type on one representative byte per byte class (bytes
        no slot tells apart) from product state `key`."""
        n = self.n
        states, w, wtype = key[:n], key[n], key[n + 1]
        alive = [(i, self._trans[i][q]) for i, q in enumerate(states) if q >= 0]  # each live slot's byte row
        dead = (CLOSE_BEFORE, -1, wtype) if w >= 0 else (DEAD, -1, -1)  # every slot dies on the byte
        code, nxt, ctype = [], [], []
        for b in self._reps_list:
            d = None
            for i, row in alive:
                if row[b] >= 0:
                    if d is None:
                        d = [-1] * n
                    d[i] = row[b]
            event = dead if d is None else self._step(d, w, wtype)
            code.append(event[0])
            nxt.append(event[1])
            ctype.append(event[2])
        return np.array(nxt, np.int32), np.array(code, np.int8), np.array(ctype, np.int32)

    # ---- private: possible types -------------------------------------------------------------

    def _own_bits(self, state: int) -> int:
        """The type the token closes with if it ends here (0 if it cannot)."""
        return 1 << int(self.wtype[state]) if self.at_accept[state] and self.winner[state] >= 0 else 0

    def _upper_bits(self, state: int) -> tuple[int, int]:
        """(bits, alive slots): an over-approximation of `possible` that is exact when at most
        one slot is alive (a slot's own reachable types, every slot state being live)."""
        bits, alive = self._own_bits(state), 0
        for i, q in enumerate(self._keys[state][: self.n]):
            if q >= 0:
                bits |= self.slots[i].reach_bits(q)
                alive += 1
        return bits, alive

    def _compute_possible(self, state: int) -> int:
        """The union of own and CLOSE_HERE types over the states reachable while the token goes
        on: searched until it reaches the upper bound, where one slot alive is exact."""
        upper, alive = self._upper_bits(state)
        if alive <= 1:
            return upper
        bits, todo, seen = 0, [state], {state}
        while todo and bits != upper:
            x = todo.pop()
            codes, nxts, types = self.rows[x] or self.build_row(x)
            bits |= self._own_bits(x)
            for c, y, t in zip(codes, nxts, types):
                if c == CLOSE_HERE:
                    bits |= 1 << t
                elif (c == CONTINUE or c == ACCEPT) and y not in seen:
                    seen.add(y)
                    known = self._possible.get(y)
                    if known is None:
                        y_upper, y_alive = self._upper_bits(y)
                        known = y_upper if y_alive <= 1 else None
                    if known is None:
                        todo.append(y)
                    else:
                        bits |= known
        return bits


def _byte_classes(slots: list) -> tuple[np.ndarray, np.ndarray]:
    """One representative byte per class of bytes with identical columns in every slot's table,
    and each byte's class."""
    if not slots:
        return np.zeros(1, dtype=np.int64), np.zeros(256, dtype=np.int64)
    return byte_classes(np.stack([s.byte_class_of() for s in slots]))  # bytes alike in every slot
