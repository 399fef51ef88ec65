"""Jump-forward: the string a DFA state forces next, and the tokens that may be appended for it.

From a state that is not accepting and has exactly one outgoing byte, the continuation is
forced until the DFA branches or accepts. The forced text (whole UTF-8 characters only) is
tokenized canonically by the tokenizer; trailing tokens are held back while some vocabulary
token allowed at their start could span past the end of the forced text (boundary healing), so
the model still picks the tokenization across the boundary.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.token_index import TokenIndex
from sgl_runtime.constrained.vocabulary import Vocabulary

MAX_FORCED_BYTES = 4096


class JumpForward:
    """Forced strings and forced token ids per DFA state, cached."""

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, index: TokenIndex) -> None:
        self.dfa = dfa
        self.vocabulary = vocabulary
        self.index = index
        self._single_byte = _single_successor_byte(dfa)  # [n_states] forced byte or -1
        self._tokens: dict[int, list[int]] = {}

    def forced_bytes(self, state: int) -> bytes:
        """The forced continuation from `state`, cut to whole UTF-8 characters ('' if none)."""
        out = bytearray()
        accepting, table, single = self.dfa.accepting, self.dfa.transitions, self._single_byte
        while not accepting[state] and single[state] >= 0 and len(out) < MAX_FORCED_BYTES:
            out.append(int(single[state]))
            state = int(table[state, single[state]])
        return whole_characters(bytes(out))

    def forced_string(self, state: int) -> str:
        return self.forced_bytes(state).decode("utf-8")

    def forced_token_ids(self, state: int) -> list[int]:
        """Tokens to append from `state`: a legal, canonical prefix of the forced text."""
        found = self._tokens.get(state)
        if found is None:
            found = self._tokens[state] = self._compute(state)
        return list(found)

    # ---- private ----------------------------------------------------------------------------

    def _compute(self, state: int) -> list[int]:
        forced = self.forced_bytes(state)
        if not forced:
            return []
        ids = self._tokenize(forced)
        if ids is None:
            return []
        return self._heal(state, forced, ids)

    def _tokenize(self, forced: bytes) -> Optional[list[int]]:
        return tokenize_forced(self.vocabulary, forced)

    def _heal(self, state: int, forced: bytes, ids: list[int]) -> list[int]:
        starts, offsets, s, pos = [], [], state, 0
        for i in ids:
            starts.append(s)
            offsets.append(pos)
            data = self.vocabulary.token_bytes[i]
            s = self.dfa.walk(s, data)
            pos += len(data)
            if s < 0:
                return []  # cannot happen for a split of the forced path; refuse rather than emit
        keep = len(ids)
        while keep > 0 and self.index.entry(starts[keep - 1]).max_token_len > len(forced) - offsets[keep - 1]:
            keep -= 1
        return ids[:keep]


def _single_successor_byte(dfa: ByteDFA) -> np.ndarray:
    live = dfa.transitions >= 0
    single = live.sum(axis=1) == 1
    return np.where(single, live.argmax(axis=1), -1)


def tokenize_forced(vocab: Vocabulary, forced: bytes) -> Optional[list[int]]:
    """Canonical ids for `forced`, else a greedy longest-match split (e.g. SentencePiece's
    dummy prefix makes the canonical encoding differ); None if no split exists."""
    try:
        ids = vocab.encode(forced.decode("utf-8"))
    except Exception:  # noqa: BLE001 - a tokenizer that cannot encode: fall back below
        ids = []
    if (
        ids
        and all(0 <= i < vocab.size and vocab.token_bytes[i] for i in ids)
        and b"".join(vocab.token_bytes[i] for i in ids) == forced
    ):
        return ids
    return _greedy_split(forced, vocab)


def whole_characters(data: bytes) -> bytes:
    """`data` cut back to whole UTF-8 characters ('' if it starts inside one)."""
    if data and 0x80 <= data[0] < 0xC0:
        return b""  # starts inside a character: let the model finish it
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            data[:cut].decode("utf-8")
            return data[:cut]
        except UnicodeDecodeError:
            continue
    return b""


def _greedy_split(data: bytes, vocab: Vocabulary) -> Optional[list[int]]:
    longest = min(vocab.max_token_len(), len(data))
    ids, pos = [], 0
    while pos < len(data):
        for size in range(min(longest, len(data) - pos), 0, -1):
            found = vocab.ids_for_bytes(data[pos : pos + size])
            if found:
                ids.append(found[0])
                pos += size
                break
        else:
            return None
    return ids
