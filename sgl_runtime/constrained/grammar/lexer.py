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
from sgl_runtime.constrained.grammar.slots import SlotDFA

CONTINUE, ACCEPT, CLOSE_BEFORE, CLOSE_HERE, DEAD = 0, 1, 2, 3, 4


class LexerContext:
    """The product automaton of one lexer context, explored eagerly from the token start."""

    def __init__(self, slots: list[SlotDFA], max_states: int = 50_000) -> None:
        self.slots = slots
        self.n = len(slots)
        self._max_states = max_states
        self._reps, self.class_of = _byte_classes(slots)  # class_of: [256] byte -> byte class
        self._reps_list = self._reps.tolist()
        self._trans = [s.trans.tolist() for s in slots]
        self._label = [s.label.tolist() for s in slots]
        self._live = [s.live.tolist() for s in slots]
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

    slot_types: list = []  # each slot's token type (set by the engine)
    unique_slots: tuple = ()  # slots of unique-array item terminals (set by the engine)

    @property
    def n_states(self) -> int:
        return len(self._keys)

    def slot_state(self, state: int, slot: int) -> int:
        """The DFA state of `slot` in product state `state` (-1: that slot has died)."""
        return self._keys[state][slot]

    def alive_slots(self, state: int) -> list[int]:
        return [i for i, s in enumerate(self._keys[state][: self.n]) if s >= 0]

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
        return nxt[self.class_of], code[self.class_of], ctype[self.class_of]

    def _class_row(self, key: tuple):
        """`_row` on one representative byte per byte class (bytes no slot tells apart)."""
        n, reps = self.n, self._reps_list
        nxt, code, ctype = [-1] * len(reps), [DEAD] * len(reps), [-1] * len(reps)
        states, w, wtype = key[:n], key[n], key[n + 1]
        limit = n if w < 0 else w + 1
        for c, b in enumerate(reps):
            d = [self._trans[i][s][b] if s >= 0 else -1 for i, s in enumerate(states)]
            new_w, new_type, accepted = w, wtype, False
            for i in range(limit):  # the first slot (in lark's order) matching here wins
                if d[i] >= 0 and self._label[i][d[i]] >= 0:
                    new_w, new_type, accepted = i, self._label[i][d[i]], True
                    break
            if new_w >= 0:
                d[new_w + 1 :] = [-1] * (n - new_w - 1)  # later slots can no longer win
            if all(s < 0 for s in d):
                code[c], ctype[c] = (CLOSE_BEFORE, wtype) if w >= 0 else (DEAD, -1)
            elif accepted and all(s < 0 for s in d[:new_w]) and not self._live[new_w][d[new_w]]:
                code[c], ctype[c] = CLOSE_HERE, new_type
            else:
                code[c] = ACCEPT if accepted else CONTINUE
                nxt[c] = self._intern((*d, new_w, new_type, int(accepted), 0))
        return np.array(nxt), np.array(code), np.array(ctype)

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
