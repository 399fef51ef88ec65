"""Budget-aware completion for grammars: a short sentence-completing continuation, forced late.

`GrammarCompletion.tokens(state)` is the canonical tokenization of a short continuation that
makes the text a sentence, found by a weighted best-first search over single bytes (the exact
single-byte masks, with optional blanks switched off, as for jump-forward), scored by bytes
read + 2 * parser stack depth, so closing brackets is preferred to opening new ones; only
bytes the vocabulary has a one-byte token for are used, so the plan can always be tokenized. It is not
always the shortest, but it is a valid completion whose length is known. A matcher with r
tokens left computes it only while r <= CHECK_TOKENS, and once len(tokens) + MARGIN >= r it
forces that plan token by token (EOS allowed where the text already is a sentence). A grammar
state needing more than CHECK_TOKENS - MARGIN tokens to finish can still be cut by the limit.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Optional, Protocol

import numpy as np

from sgl_runtime.constrained.grammar.engine import Forks, GrammarState
from sgl_runtime.constrained.jump_forward import tokenize_forced


class _Grammar(Protocol):
    """What a completion planner reads of its grammar constraint (compiler.GrammarConstraint)."""

    engine: Any
    vocabulary: Any

    def at_eof(self, state) -> bool: ...


CHECK_TOKENS = 40
MARGIN = 6
MAX_EXPANSIONS = 3000
DEPTH_WEIGHT = 2


class GrammarCompletion:
    """Completion plans of one grammar constraint, cached per grammar state."""

    def __init__(self, constraint: _Grammar, cache_size: int = 4096) -> None:
        self.constraint = constraint
        self.engine = constraint.engine
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        vocab = constraint.vocabulary  # bytes with a one-byte token: the completion uses only these
        self._byte_ok = np.array([bool(vocab.ids_for_bytes(bytes([b]))) for b in range(256)])

    def tokens(self, state) -> Optional[list[int]]:
        """Token ids of a completion from `state` ([] if the text is a sentence), None if none found
        (from Forks: the first of its members' that is found)."""
        if isinstance(state, Forks):
            return next((plan for plan in map(self.tokens, state) if plan is not None), None)
        hit = self._cache.get(state, False)
        if hit is False:
            data = self.completion_bytes(state)
            hit = None if data is None else self._tokenize(state, data)
            self._cache[state] = hit
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return None if hit is None else list(hit)

    def completion_bytes(self, state: GrammarState) -> Optional[bytes]:
        """Bytes that make the text a sentence (b'' if it is one), None past MAX_EXPANSIONS."""
        engine, c = self.engine, self.constraint
        with c._lock:
            start = _no_blanks(state, engine)
            if engine.at_eof(start):
                return b""
            tie = itertools.count()
            heap = [(DEPTH_WEIGHT * len(start.stack), next(tie), 0, start, b"")]
            seen = {start.bare()}  # item texts grow with every byte: not told apart here
            for _ in range(MAX_EXPANSIONS):
                if not heap:
                    return None
                _, _, g, s, path = heapq.heappop(heap)
                if engine.at_eof(s):
                    return path
                bits = np.unpackbits(c.forced._bytes.mask(s).view(np.uint8), bitorder="little")
                for b in np.nonzero(bits[:256].astype(bool) & self._byte_ok)[0].tolist():
                    for nxt in engine.feed_all(s, bytes([b])):
                        nxt = _no_blanks(nxt, engine)
                        key = nxt.bare()  # the path itself is fed with them: a repeated item is still rejected
                        if key in seen:
                            continue
                        seen.add(key)
                        f = g + 1 + DEPTH_WEIGHT * len(nxt.stack)
                        heapq.heappush(heap, (f, next(tie), g + 1, nxt, path + bytes([b])))
        return None

    def _tokenize(self, state: GrammarState, data: bytes) -> Optional[list[int]]:
        """Canonical ids for `data` that step legally from `state`, else one byte per token."""
        c = self.constraint
        if not data:
            return []
        for ids in (tokenize_forced(c.vocabulary, data), _byte_tokens(c.vocabulary, data)):
            s = state
            for i in ids or []:
                s = c.step(s, i)
                if s is None:
                    break
            if ids and s is not None and c.at_eof(s):
                return ids
        return None


def _no_blanks(state: GrammarState, engine) -> GrammarState:
    return replace(state, ignored=engine.max_ignored_run)


def _byte_tokens(vocab, data: bytes) -> list[int]:
    ids = []
    for b in data:
        found = vocab.ids_for_bytes(bytes([b]))
        if not found:
            return []
        ids.append(found[0])
    return ids
