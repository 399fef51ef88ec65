"""Expands a character DFA into a byte DFA over UTF-8, one byte per transition.

Character state s keeps id s; multi-byte characters get intermediate states. "Consume k more
continuation bytes, then be in character state t" is one shared chain per (k, t), so a class
such as `[^"\\]` (all of Unicode but two characters) costs a handful of states, not 1.1 million.
Overlong forms, surrogates and code points past U+10FFFF are never accepted.
"""

from __future__ import annotations

import numpy as np

from sgl_runtime.constrained.errors import ConstraintError

_MAX_CP = 0x10FFFF
# (first lead byte, last lead byte, continuation bytes, payload mask, smallest valid code point)
_LEADS = ((0xC2, 0xDF, 1, 0x1F, 0x80), (0xE0, 0xEF, 2, 0x0F, 0x800), (0xF0, 0xF4, 3, 0x07, 0x10000))


class Utf8Expander:
    """Builds byte transitions from per-state character-segment targets."""

    def __init__(self, partition: tuple[np.ndarray, np.ndarray, int], max_states: int) -> None:
        starts, symbols, dead = partition
        if starts[-1] <= _MAX_CP:  # code points past U+10FFFF are dead
            starts = np.append(starts, _MAX_CP + 1)
            symbols = np.append(symbols, dead)
        self.starts, self.symbols, self.num_symbols = starts, symbols, dead + 1
        self.max_states = max_states
        self._rows: list[np.ndarray] = []
        self._chains: dict[tuple[int, int], int] = {}
        self._nodes: dict[tuple, int] = {}
        self._n_char = 0

    def expand(self, symbol_targets: np.ndarray, accepting_chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """symbol_targets [n_char, num_symbols] -> (byte table [n, 256] int32, accepting [n] bool)."""
        self._n_char = n_char = symbol_targets.shape[0]
        seg = symbol_targets[:, self.symbols]  # [n_char, n_segments] target per code-point segment
        table = np.full((n_char, 256), -1, dtype=np.int32)
        table[:, :0x80] = seg[:, self._segment_of(np.arange(0x80))]
        for first, last, k, mask, min_cp in _LEADS:
            for lead in range(first, last + 1):
                lo = (lead & mask) << (6 * k)
                self._fill_lead(table, seg, lead, k, lo, min_cp)
        extra = np.array(self._rows, dtype=np.int32).reshape(-1, 256)
        accepting = np.concatenate([accepting_chars, np.zeros(len(extra), dtype=bool)])
        return np.concatenate([table, extra]), accepting

    # ---- private ---------------------------------------------------------------------------

    def _segment_of(self, cps: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, cps, side="right") - 1

    def _fill_lead(self, table: np.ndarray, seg: np.ndarray, lead: int, k: int, lo: int, min_cp: int) -> None:
        hi = lo + (64**k) - 1
        i, j = self._segment_of(np.array([max(lo, min_cp), hi]))
        block = seg[:, i : j + 1]
        first = block[:, 0]
        uniform = (block == first[:, None]).all(axis=1)
        clipped = lo < min_cp
        chained = np.nonzero(uniform & (first >= 0) & (not clipped))[0]
        if chained.size:
            targets, inverse = np.unique(first[chained], return_inverse=True)
            chain_ids = np.array([self._chain(k, int(t)) for t in targets], dtype=np.int32)
            table[chained, lead] = chain_ids[inverse.reshape(-1)]
        for s in np.nonzero(~uniform | (clipped & (first >= 0)))[0]:
            table[s, lead] = self._node(seg[s], k, lo, min_cp)

    def _chain(self, k: int, target: int) -> int:
        """A state from which any k continuation bytes lead to `target`."""
        if k == 0:
            return target
        key = (k, target)
        if key not in self._chains:
            row = np.full(256, -1, dtype=np.int32)
            row[0x80:0xC0] = self._chain(k - 1, target)
            self._chains[key] = self._new_state(row)
        return self._chains[key]

    def _node(self, targets: np.ndarray, k: int, lo: int, min_cp: int) -> int:
        """A state for the code points [lo, lo + 64**k) whose targets are not all the same;
        memoised on the targets of the segments it covers (shared by equal states)."""
        i, j = self._segment_of(np.array([max(lo, min_cp), lo + 64**k - 1]))
        key = (k, lo, min_cp, int(i), targets[i : j + 1].tobytes())
        found = self._nodes.get(key)
        if found is not None:
            return found
        changes = np.concatenate([[0], np.cumsum(targets[1:] != targets[:-1])])
        span = 64 ** (k - 1)
        clo = lo + np.arange(64, dtype=np.int64) * span
        chi = clo + span - 1
        ci, cj = self._segment_of(np.maximum(clo, min_cp)), self._segment_of(chi)
        first = targets[ci]
        partial = (clo < min_cp) & (chi >= min_cp)
        uniform = (changes[cj] == changes[ci]) & ~partial
        row = np.full(256, -1, dtype=np.int32)
        chained = np.nonzero(uniform & (chi >= min_cp) & (first >= 0))[0]
        for t in np.unique(first[chained]):
            row[0x80 + chained[first[chained] == t]] = self._chain(k - 1, int(t))
        for c in np.nonzero(~uniform & (chi >= min_cp))[0]:
            row[0x80 + c] = self._node(targets, k - 1, int(clo[c]), min_cp)
        self._nodes[key] = state = self._new_state(row)
        return state

    def _new_state(self, row: np.ndarray) -> int:
        if self._n_char + len(self._rows) >= self.max_states:
            raise ConstraintError(f"constraint too large: byte DFA exceeds {self.max_states} states")
        self._rows.append(row)
        return self._n_char + len(self._rows) - 1
