"""The vocabulary's unique token strings laid out for vectorised walks through a byte DFA."""

from __future__ import annotations

import numpy as np


class WalkTable:
    """Unique token strings laid out so that a DFA can consume byte j of all of them at once.

    `order[r]` is the unique-string index of row r; rows are sorted by length, longest first,
    so the strings longer than j are exactly rows [0, counts[j]). `matrix[j, r]` is byte j of
    row r (0 past its end). `lengths[r]` is its length. `token_row[i]` is token i's row or -1.
    `rows_by_first_byte[first_byte_offsets[b]:first_byte_offsets[b + 1]]` are the rows starting with b.
    `trie_parent` / `trie_byte` / `row_node`: the strings' prefix trie (see `_build_trie`).
    """

    def __init__(self, strings: list[bytes], token_to_unique: np.ndarray) -> None:
        lengths = np.array([len(s) for s in strings], dtype=np.int64)
        self.order = np.argsort(-lengths, kind="stable")
        self.lengths = lengths[self.order]
        max_len = int(self.lengths[0]) if len(strings) else 0
        self.counts = np.array([(self.lengths > j).sum() for j in range(max_len)], dtype=np.int64)
        flat = np.frombuffer(b"".join(strings[r].ljust(max_len, b"\0") for r in self.order), dtype=np.uint8)
        self.matrix = np.ascontiguousarray(flat.reshape(len(strings), max_len).T)  # [max_len, n_unique]
        by_first = np.argsort(self.matrix[0] if max_len else np.zeros(0, np.uint8), kind="stable")
        self.rows_by_first_byte = by_first  # rows grouped by their first byte
        self.first_byte_offsets = np.searchsorted(
            self.matrix[0][by_first] if max_len else by_first, np.arange(257)
        )  # group b: [offsets[b], offsets[b+1])
        self._build_trie()
        row_of_unique = np.empty(len(strings), dtype=np.int64)
        row_of_unique[self.order] = np.arange(len(strings))
        self.token_row = np.where(token_to_unique >= 0, row_of_unique[np.maximum(token_to_unique, 0)], -1)

    def _build_trie(self) -> None:
        """Prefix trie, level by level: `trie_parent[j]` / `trie_byte[j]` per node of depth j + 1
        (parent index within level j - 1); `row_node[r]` is row r's node in level len - 1."""
        self.trie_parent: list[np.ndarray] = []
        self.trie_byte: list[np.ndarray] = []
        self.row_node = np.zeros(len(self.lengths), dtype=np.int64)
        node = np.zeros(len(self.lengths), dtype=np.int64)
        for j, count in enumerate(self.counts):
            key = node[:count] * 256 + self.matrix[j, :count]
            uniq, node_j = np.unique(key, return_inverse=True)
            node[:count] = node_j.reshape(-1)
            self.trie_parent.append(uniq // 256)
            self.trie_byte.append((uniq % 256).astype(np.int64))
            ends = self.lengths[:count] == j + 1
            self.row_node[:count][ends] = node[:count][ends]
