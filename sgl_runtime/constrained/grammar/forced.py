"""Jump-forward for grammars: the text a grammar state forces next, and tokens to append.

The forced text is found byte by byte with the same exact masks over the 256 single bytes,
with ignored tokens (blanks) switched off, so it is the unique continuation that adds no
optional whitespace: e.g. `:` after a JSON object key, `ue` after `tr`. It stops where the
text may end, where two bytes are possible, and at whole UTF-8 characters. It is tokenized
canonically; trailing tokens are held back while a token allowed at their start could span
past the forced text (boundary healing), so the model still picks the tokenization there.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Optional, Protocol

import numpy as np

from sgl_runtime.constrained.grammar.engine import Forks, GrammarState
from sgl_runtime.constrained.grammar.walk import MaskBuilder, TokenTable
from sgl_runtime.constrained.jump_forward import tokenize_forced, whole_characters


class _Grammar(Protocol):
    """What the forced-text finder reads of its grammar constraint (compiler.GrammarConstraint)."""

    engine: Any
    vocabulary: Any
    table: TokenTable
    _lock: Any

    def bitmask(self, state: GrammarState) -> np.ndarray: ...

    def step(self, state: GrammarState, token_id: int) -> Optional[GrammarState]: ...


MAX_FORCED_BYTES = 256


class ForcedTokens:
    """Forced strings and jump-forward token ids of a grammar constraint, cached per state."""

    def __init__(self, constraint: _Grammar, cache_size: int = 1024) -> None:
        self.constraint = constraint
        self.engine = constraint.engine
        self._bytes = MaskBuilder(self.engine, TokenTable([bytes([b]) for b in range(256)]))
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size

    def forced_bytes(self, state) -> bytes:
        """The forced continuation from `state`, cut to whole UTF-8 characters (from Forks: what
        every member forces)."""
        if isinstance(state, Forks):
            return whole_characters(os.path.commonprefix([self.forced_bytes(member) for member in state]))
        engine = self.engine
        with self.constraint._lock:
            s = replace(state, ignored=engine.max_ignored_run)
            out = bytearray()
            while len(out) < MAX_FORCED_BYTES and not engine.at_eof(s):
                bits = np.unpackbits(self._bytes.mask(s).view(np.uint8), bitorder="little")
                allowed = np.nonzero(bits[:256])[0]
                if len(allowed) != 1:
                    break
                ways = engine.feed_all(s, bytes((int(allowed[0]),)))
                if len(ways) != 1:
                    break  # a forking grammar's parses part here: nothing more is forced
                out.append(int(allowed[0]))
                s = replace(ways[0], ignored=engine.max_ignored_run)  # still no blanks
        return whole_characters(bytes(out))

    def string(self, state: GrammarState) -> str:
        return self.forced_bytes(state).decode("utf-8")

    def token_ids(self, state: GrammarState) -> list[int]:
        """Tokens that may be appended from `state`: a legal, canonical prefix of the forced text."""
        hit = self._cache.get(state)
        if hit is None:
            hit = self._compute(state)
            self._cache[state] = hit
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return list(hit)

    # ---- private ----------------------------------------------------------------------------

    def _compute(self, state: GrammarState) -> list[int]:
        forced = self.forced_bytes(state)
        if not forced:
            return []
        vocab, c = self.constraint.vocabulary, self.constraint
        ids = tokenize_forced(vocab, forced)
        if not ids:
            return []
        starts, s = [], state
        for i in ids:
            starts.append(s)
            s = c.step(s, i)
            if s is None:
                return []
        keep, offset = len(ids), len(forced)
        while keep > 0:
            offset -= len(vocab.token_bytes[ids[keep - 1]])
            if not self._could_span(starts[keep - 1], forced[offset:]):
                break
            keep -= 1
        return ids[:keep]

    def _could_span(self, state: GrammarState, rest: bytes) -> bool:
        """Whether a token allowed at `state` covers `rest` and goes on past it."""
        table = self.constraint.table
        allowed = np.nonzero(
            np.unpackbits(self.constraint.bitmask(state).view(np.uint8), bitorder="little")[: table.size]
        )[0]
        longer = allowed[table.lens[allowed] > len(rest)]
        if not longer.size:
            return False
        head = table.flat[table.starts[longer][:, None] + np.arange(len(rest))[None, :]]
        return bool((head == np.frombuffer(rest, dtype=np.uint8)[None, :]).all(1).any())
