"""Budget-aware masks for DFA constraints: end on an accepting state within max_new_tokens.

Per DFA state, `dist` is the minimum number of BYTES to reach an accepting state (reverse BFS
over the byte transitions), and `succ` the smallest byte that lowers it: following `succ` from
any state spells one fixed shortest completion, and each state's completion is a suffix of its
predecessor's. `tokens_to_accept(s)` = U(s): 0 where accepting, else 1 + the least U(s') over
the vocabulary tokens that are prefixes of that completion (s' the state after the token).
U(s) is an upper bound on the tokens needed from s (<= dist with one-byte tokens, and far less
where a schema forces long keys that tokens cover), and it is consistent: from any state with
U = u >= 1 some token leads to U = u - 1. So with r >= 1 tokens left a token t is allowed iff
U(next(t)) <= r - 1 (EOS only where accepting), and at r = 0 only EOS: the text always ends
on a sentence within the budget. Masks are unchanged (one comparison) while r > max dist, or
while r - 1 >= the largest U of the states an allowed token leads to. If U(state) > r when the
budget is set no sentence is known to fit; masks stay unrestricted and the output is a prefix.
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


def shortest_successors(dfa: ByteDFA, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(byte, state) per state: the smallest byte lowering dist by one (-1 where none)."""
    n = dfa.n_states
    target = np.where(dfa.transitions >= 0, dfa.transitions, n)
    ext = np.append(dist, UNREACHABLE)
    down = ext[target] == (dist[:, None] - 1)
    byte = np.where(down.any(axis=1), down.argmax(axis=1), -1)
    state = np.where(byte >= 0, target[np.arange(n), np.maximum(byte, 0)], -1)
    return byte.astype(np.int32), state.astype(np.int32)


class DFABudget:
    """Budget-restricted masks of one DFA constraint, cached per (state, remaining tokens)."""

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, index: TokenIndex, cache_size: int = 4096) -> None:
        self.dfa = dfa
        self.vocabulary = vocabulary
        self.index = index
        self._next_max: dict[int, int] = {}
        self._cache: OrderedDict = OrderedDict()
        self._allowed_cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @cached_property
    def dist(self) -> np.ndarray:
        return byte_distances(self.dfa)

    @cached_property
    def max_dist(self) -> int:
        finite = self.dist[self.dist < UNREACHABLE]
        return int(finite.max()) if finite.size else 0

    @cached_property
    def _longest(self) -> int:
        return self.vocabulary.max_token_len()

    @cached_property
    def _succ(self) -> tuple[np.ndarray, np.ndarray]:
        return shortest_successors(self.dfa, self.dist)

    @cached_property
    def _tokens(self) -> np.ndarray:
        return np.full(self.dfa.n_states, -1, dtype=np.int64)  # U per state, -1: not yet computed

    def tokens_to_accept(self, state: int) -> int:
        """U(state): tokens that surely suffice to reach an accepting state (UNREACHABLE if none)."""
        known = self._tokens
        if known[state] >= 0:
            return int(known[state])
        if self.dist[state] >= UNREACHABLE:
            known[state] = UNREACHABLE
            return UNREACHABLE
        byte, nxt = self._succ
        path, data = [state], bytearray()
        while known[path[-1]] < 0 and not self.dfa.accepting[path[-1]]:
            data.append(int(byte[path[-1]]))
            path.append(int(nxt[path[-1]]))
        if known[path[-1]] < 0:
            known[path[-1]] = 0
        longest = self._longest
        for i in range(len(path) - 2, -1, -1):
            best = UNREACHABLE
            for k in range(1, min(longest, len(path) - 1 - i) + 1):
                if self.vocabulary.ids_for_bytes(bytes(data[i : i + k])):
                    best = min(best, 1 + int(known[path[i + k]]))
            known[path[i]] = best
        return int(known[state])

    def mask(self, state: int, remaining: int) -> Optional[np.ndarray]:
        """The mask with `remaining` tokens left, or None where the plain mask already fits."""
        if remaining > self.max_dist or self.tokens_to_accept(state) > remaining:
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
            _, finals = self._allowed(state)
            found = max((self.tokens_to_accept(int(f)) for f in np.unique(finals)), default=0)
            self._next_max[state] = found
        return found

    def _allowed(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            hit = self._allowed_cache.get(state)
        if hit is None:
            hit = self.index.allowed(state)
            with self._lock:
                self._allowed_cache[state] = hit
                if len(self._allowed_cache) > 256:
                    self._allowed_cache.popitem(last=False)
        return hit

    def _restricted(self, state: int, remaining: int) -> np.ndarray:
        allowed = np.zeros(self.vocabulary.size, dtype=bool)
        if remaining >= 1:
            ids, finals = self._allowed(state)
            uniq, inverse = np.unique(finals, return_inverse=True)
            fits = np.array([self.tokens_to_accept(int(f)) <= remaining - 1 for f in uniq], dtype=bool)
            allowed[ids[fits[inverse] if uniq.size else np.zeros(0, dtype=bool)]] = True
        if self.dfa.accepting[state] or not allowed.any():
            allowed[list(self.vocabulary.eos_token_ids)] = True
        return _pack(allowed, self.vocabulary.num_words)
