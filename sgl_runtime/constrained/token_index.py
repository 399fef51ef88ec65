"""Per DFA state, the vocabulary tokens that can be consumed whole and the states they lead to.

Computed lazily the first time a state is visited and cached as a packed int32 bitmask: all
unique token strings are walked through the DFA together, one byte position per numpy step
(never a Python loop over tokens). EOS is allowed exactly where the DFA accepts, and forced
where no token can continue (so sampling never faces an all-masked row).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.vocabulary import Vocabulary

DEFAULT_MAX_CACHED_STATES = 4096


@dataclass(frozen=True)
class StateEntry:
    """What the index keeps per visited state."""

    bitmask: np.ndarray  # int32 [num_words], read-only
    num_allowed: int  # tokens allowed, EOS excluded
    max_token_len: int  # longest allowed token in bytes (0 if none)


class TokenIndex:
    """Lazy state -> allowed tokens map over one DFA and one vocabulary."""

    def __init__(
        self, dfa: ByteDFA, vocabulary: Vocabulary, max_cached_states: int = DEFAULT_MAX_CACHED_STATES
    ) -> None:
        self.dfa = dfa
        self.vocabulary = vocabulary
        self.max_cached_states = max_cached_states
        n = dfa.n_states
        dead_row = np.full((1, 256), n, dtype=np.int32)
        table = np.where(dfa.transitions >= 0, dfa.transitions, n).astype(np.int32)
        self._flat = np.concatenate([table, dead_row]).ravel()  # [(n + 1) * 256], state n = dead
        self._entries: dict[int, StateEntry] = {}
        self._lock = threading.Lock()

    # ---- public -----------------------------------------------------------------------------

    def entry(self, state: int) -> StateEntry:
        """The cached entry of `state`, computing it on first use."""
        found = self._entries.get(state)
        if found is not None:
            return found
        entry = self._compute(state)
        with self._lock:
            if len(self._entries) >= self.max_cached_states:
                self._entries.pop(next(iter(self._entries)))
            self._entries[state] = entry
        return entry

    def is_cached(self, state: int) -> bool:
        return state in self._entries

    def bitmask(self, state: int) -> np.ndarray:
        """Packed int32 mask: bit i of word i // 32 set iff token i is allowed at `state`."""
        return self.entry(state).bitmask

    def allowed(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed token ids ascending, EOS excluded; the state each leads to)."""
        finals = self._token_finals(state)
        ids = np.nonzero(finals >= 0)[0].astype(np.int32)
        return ids, finals[ids]

    def num_cached_states(self) -> int:
        return len(self._entries)

    # ---- private ----------------------------------------------------------------------------

    def _compute(self, state: int) -> StateEntry:
        table = self.vocabulary.walk_table()
        row_final = self._walk_rows(state)
        allowed_rows = row_final >= 0
        max_len = int(table.lengths[allowed_rows].max()) if allowed_rows.any() else 0
        allowed = self._rows_to_tokens(allowed_rows)
        num_allowed = int(allowed.sum())
        eos = bool(self.dfa.accepting[state]) or num_allowed == 0
        if eos and self.vocabulary.eos_token_ids:
            allowed[list(self.vocabulary.eos_token_ids)] = True
        return StateEntry(_pack(allowed, self.vocabulary.num_words), num_allowed, max_len)

    def _walk_rows(self, state: int) -> np.ndarray:
        """Final DFA state of every unique token string (by walk-table row), -1 where it dies."""
        table = self.vocabulary.walk_table()
        live = np.nonzero(self.dfa.transitions[state] >= 0)[0]
        offsets = table.first_byte_offsets
        live_rows = int((offsets[live + 1] - offsets[live]).sum())
        if live_rows * 2 > len(table.lengths):
            return self._walk_dense(state)
        rows = (
            np.concatenate([table.rows_by_first_byte[offsets[b] : offsets[b + 1]] for b in live])
            if live.size
            else np.zeros(0, dtype=np.int64)
        )
        return self._walk_sparse(state, rows)

    def _walk_dense(self, state: int) -> np.ndarray:
        """All token strings at once by walking the vocabulary's prefix trie level by level
        (333k nodes for Qwen2.5's 976k token bytes); for permissive states."""
        table = self.vocabulary.walk_table()
        dead, flat = self.dfa.n_states, self._flat
        final = np.full(len(table.lengths), dead, dtype=np.int64)
        states = np.array([state], dtype=np.int64)  # the root
        counts = np.append(table.counts, 0)
        for j, (parent, byte) in enumerate(zip(table.trie_parent, table.trie_byte)):
            states = flat[states[parent] * 256 + byte]  # [nodes at depth j + 1]
            ending = slice(counts[j + 1], counts[j])  # rows of length j + 1 (sorted longest first)
            final[ending] = states[table.row_node[ending]]
        return np.where(final == dead, -1, final)

    def _walk_sparse(self, state: int, rows: np.ndarray) -> np.ndarray:
        """Only `rows` (those whose first byte is live), dropping rows as they die or end."""
        table = self.vocabulary.walk_table()
        dead, flat = self.dfa.n_states, self._flat
        final = np.full(len(table.lengths), -1, dtype=np.int64)
        states = np.full(len(rows), state, dtype=np.int64)
        j = 0
        while rows.size:
            states = flat[states * 256 + table.matrix[j, rows]]
            j += 1
            keep = states != dead
            rows, states = rows[keep], states[keep]
            done = table.lengths[rows] == j
            final[rows[done]] = states[done]
            rows, states = rows[~done], states[~done]
        return final

    def _rows_to_tokens(self, allowed_rows: np.ndarray) -> np.ndarray:
        token_row = self.vocabulary.walk_table().token_row
        ext = np.append(allowed_rows, False)  # row -1 (no string) -> never allowed
        return ext[token_row]  # [vocab.size] bool

    def _token_finals(self, state: int) -> np.ndarray:
        row_final = np.append(self._walk_rows(state), -1)
        return row_final[self.vocabulary.walk_table().token_row]  # [vocab.size]


def _pack(allowed: np.ndarray, num_words: int) -> np.ndarray:
    """bool [size] -> int32 [num_words], little-endian bit order within each word."""
    padded = np.zeros(num_words * 32, dtype=bool)
    padded[: len(allowed)] = allowed
    packed = np.packbits(padded, bitorder="little").view("<i4").astype(np.int32)
    packed.flags.writeable = False
    return packed
