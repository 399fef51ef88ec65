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

import numpy as np

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar_slots import SlotDFA

CONTINUE, ACCEPT, CLOSE_BEFORE, CLOSE_HERE, DEAD = 0, 1, 2, 3, 4


class LexerContext:
    """The product automaton of one lexer context, explored eagerly from the token start."""

    def __init__(self, slots: list[SlotDFA], max_states: int = 50_000) -> None:
        self.slots = slots
        self.n = len(slots)
        self._max_states = max_states
        self._reps, self._class_of = _byte_classes(slots)
        self._index: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        start = (*[s.initial for s in slots], -1, -1, 0, 1)
        self.initial = self._intern(start)
        rows = self._explore()
        self.nxt = np.stack([r[0] for r in rows]).astype(np.int32)  # [S, 256]
        self.code = np.stack([r[1] for r in rows]).astype(np.int8)  # [S, 256]
        self.ctype = np.stack([r[2] for r in rows]).astype(np.int32)  # [S, 256]
        keys = np.array(self._keys, dtype=np.int64)  # [S, n + 4]
        self.winner = keys[:, self.n].astype(np.int32)
        self.wtype = keys[:, self.n + 1].astype(np.int32)
        self.at_accept = keys[:, self.n + 2].astype(bool)
        self.possible = self._possible_types()

    @property
    def n_states(self) -> int:
        return len(self._keys)

    def is_fresh(self, state: int) -> bool:
        return state == self.initial

    # ---- private: exploration -------------------------------------------------------------

    def _intern(self, key: tuple) -> int:
        idx = self._index.get(key)
        if idx is None:
            idx = len(self._keys)
            if idx >= self._max_states:
                raise ConstraintError(f"grammar lexer context too large (> {self._max_states} states)")
            self._index[key] = idx
            self._keys.append(key)
        return idx

    def _explore(self) -> list:
        rows, i = [], 0
        while i < len(self._keys):
            rows.append(self._row(self._keys[i]))
            i += 1
        return rows

    def _row(self, key: tuple):
        """Next state, event and closed type for all 256 bytes from product state `key`."""
        nxt, code, ctype = self._class_row(key)
        return nxt[self._class_of], code[self._class_of], ctype[self._class_of]

    def _class_row(self, key: tuple):
        """`_row` on one representative byte per byte class (bytes no slot tells apart)."""
        n, k = self.n, len(self._reps)
        cols = np.arange(k)
        if n == 0:  # a parser state that only accepts the end of input
            return np.full(k, -1), np.full(k, DEAD), np.full(k, -1)
        w, wtype = key[n], key[n + 1]
        d = np.full((n, k), -1, dtype=np.int64)
        lab = np.full((n, k), -1, dtype=np.int64)
        for i, s in enumerate(key[:n]):
            if s >= 0:
                d[i] = self.slots[i].trans[s][self._reps]
                lab[i] = np.where(d[i] >= 0, self.slots[i].label[np.maximum(d[i], 0)], -1)
        limit = n if w < 0 else w + 1
        acc = lab[:limit] >= 0
        has = acc.any(0)
        first = acc.argmax(0)
        new_w = np.where(has, first, w)
        new_wtype = np.where(has, lab[first, cols], wtype)
        after = (np.arange(n)[:, None] > new_w[None, :]) & (new_w >= 0)[None, :]
        d[after] = -1
        alive = d >= 0
        any_alive = alive.any(0)
        earlier_alive = np.zeros(k, dtype=bool)
        winner_live = np.zeros(k, dtype=bool)
        for i in range(n):
            sel = new_w == i
            if sel.any():
                earlier_alive[sel] = alive[:i, sel].any(0) if i else False
                ws = d[i, sel]
                winner_live[sel] = (ws >= 0) & self.slots[i].live[np.maximum(ws, 0)]
        code = np.where(has, ACCEPT, CONTINUE)
        close_here = has & ~earlier_alive & ~winner_live
        code = np.where(close_here, CLOSE_HERE, code)
        code = np.where(~any_alive, CLOSE_BEFORE if w >= 0 else DEAD, code)
        ctype = np.where(code == CLOSE_BEFORE, wtype, np.where(code == CLOSE_HERE, new_wtype, -1))
        nxt = np.full(k, -1, dtype=np.int64)
        go = (code == CONTINUE) | (code == ACCEPT)
        if go.any():
            mat = np.concatenate([d, new_w[None], new_wtype[None], has[None].astype(np.int64),
                                  np.zeros((1, k), np.int64)], axis=0)[:, go]  # [n + 4, k']
            uniq, inverse = np.unique(mat, axis=1, return_inverse=True)
            ids = np.array([self._intern(tuple(col.tolist())) for col in uniq.T], dtype=np.int64)
            nxt[go] = ids[inverse.reshape(-1)]
        return nxt, code, ctype

    def _possible_types(self) -> list[int]:
        """Bitset per state of the types a continuation can close the token with."""
        n_states = self.n_states
        own = [0] * n_states
        succ = []
        for s in range(n_states):
            bits = 0
            if self.at_accept[s] and self.winner[s] >= 0:
                bits |= 1 << int(self.wtype[s])
            for t in np.unique(self.ctype[s][self.code[s] == CLOSE_HERE]).tolist():
                bits |= 1 << t
            own[s] = bits
            go = (self.code[s] == CONTINUE) | (self.code[s] == ACCEPT)
            succ.append([x for x in np.unique(self.nxt[s][go]).tolist() if x != s])
        poss = list(own)
        changed = True
        while changed:
            changed = False
            for s in reversed(range(n_states)):
                bits = poss[s]
                for t in succ[s]:
                    bits |= poss[t]
                if bits != poss[s]:
                    poss[s] = bits
                    changed = True
        return poss


def _byte_classes(slots: list[SlotDFA]) -> tuple[np.ndarray, np.ndarray]:
    """One representative byte per class of bytes with identical columns in every slot DFA,
    and each byte's class."""
    if not slots:
        return np.zeros(1, dtype=np.int64), np.zeros(256, dtype=np.int64)
    cols = np.concatenate([s.trans for s in slots], axis=0).T  # [256, sum of slot states]
    _, reps, class_of = np.unique(cols, axis=0, return_index=True, return_inverse=True)
    return reps.astype(np.int64), class_of.reshape(-1).astype(np.int64)
