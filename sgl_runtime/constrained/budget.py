"""Budget-aware masks for DFA constraints: end on an accepting state within max_new_tokens.

Per DFA state, `dist` is the minimum number of BYTES to reach an accepting state (reverse BFS
over the byte transitions). Byte-level vocabularies hold a token for every single byte, so a
state at byte distance d can always finish in <= d tokens. With r >= 1 tokens left, a token t
is allowed only if dist[next(t)] <= r - 1 (EOS only where the text is accepting); at r = 0 only
EOS. Masks are unchanged (no work beyond one comparison) while r - 1 >= the largest dist of any
state an allowed token leads to. If the start state's dist exceeds max_new_tokens no sentence
fits; the mask is then left unrestricted and the output is a prefix. A vocabulary that lacks
some single-byte token gets the same byte distances (a lower bound on tokens), documented as
best effort: such vocabularies can in rare cases still be cut by the length limit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import cached_property
from typing import Optional

import numpy as np

from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.token_index import TokenIndex, _pack
from sgl_runtime.constrained.vocabulary import Vocabulary

UNREACHABLE = np.iinfo(np.int32).max // 2


def byte_distances(dfa: ByteDFA) -> np.ndarray:
    """int32 [n_states]: fewest bytes from each state to an accepting one (UNREACHABLE if none)."""
    n = dfa.n_states
    table = np.where(dfa.transitions >= 0, dfa.transitions, n)  # dead -> n
    dist = np.full(n, UNREACHABLE, dtype=np.int32)
    frontier = dfa.accepting.copy()
    dist[frontier] = 0
    level = 0
    while frontier.any():
        level += 1
        hit = np.append(frontier, False)[table].any(axis=1)
        frontier = hit & (dist == UNREACHABLE)
        dist[frontier] = level
    return dist


class DFABudget:
    """Budget-restricted masks of one DFA constraint, cached per (state, remaining tokens)."""

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, index: TokenIndex,
                 cache_size: int = 4096) -> None:
        self.dfa = dfa
        self.vocabulary = vocabulary
        self.index = index
        self._next_max: dict[int, int] = {}
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @cached_property
    def dist(self) -> np.ndarray:
        return byte_distances(self.dfa)

    @cached_property
    def max_dist(self) -> int:
        finite = self.dist[self.dist < UNREACHABLE]
        return int(finite.max()) if finite.size else 0

    def mask(self, state: int, remaining: int) -> Optional[np.ndarray]:
        """The mask with `remaining` tokens left, or None where the plain mask already fits."""
        if remaining > self.max_dist or self.dist[state] > remaining:
            return None  # plenty left, or no sentence fits any more (best prefix)
        if remaining >= 1 and remaining - 1 >= self._max_next_dist(state):
            return None
        key = (state, remaining)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        mask = self._restricted(state, remaining)
        with self._lock:
            self._cache[key] = mask
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return mask

    def _max_next_dist(self, state: int) -> int:
        found = self._next_max.get(state)
        if found is None:
            _, finals = self.index.allowed(state)
            found = int(self.dist[finals].max()) if finals.size else 0
            self._next_max[state] = found
        return found

    def _restricted(self, state: int, remaining: int) -> np.ndarray:
        allowed = np.zeros(self.vocabulary.size, dtype=bool)
        if remaining >= 1:
            ids, finals = self.index.allowed(state)
            allowed[ids[self.dist[finals] <= remaining - 1]] = True
        if self.dfa.accepting[state] or not allowed.any():
            allowed[list(self.vocabulary.eos_token_ids)] = True
        return _pack(allowed, self.vocabulary.num_words)
