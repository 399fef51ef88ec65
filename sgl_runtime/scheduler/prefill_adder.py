"""Admission control: which waiting requests join the next prefill batch under the token budgets,
the new-token reservation ratio, and retraction when decode memory runs out."""

from __future__ import annotations

import enum
import time
from typing import Optional

import torch

from sgl_runtime.mem_cache.radix_cache import RadixCache
from sgl_runtime.scheduler.req import Req

# Upper bound of one request's expected output when reserving memory (as SGLang's estimate clip).
CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
# A waiting request sharing at least this many more tokens with a request of the batch being built
# than with the radix cache waits one round: its prefix is cached once that request's forward ran.
IN_BATCH_PREFIX_MIN_SHARED = 32


class NewTokenRatio:
    """Fraction of each running request's remaining max_new_tokens reserved in the KV budget.

    Starts high, decays a little every decode step (requests usually stop early), and
    jumps back up after a retraction (the estimate was too optimistic).
    """

    def __init__(self, conservativeness: float) -> None:
        self.init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
        # Requests that surely decode max_new_tokens (runs_to_length) need no estimate: they reserve
        # all of it, unless a conservativeness below 1 asks for over-admission.
        self.certain = min(conservativeness, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay_step = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.value = self.init

    def decay(self) -> None:
        self.value = max(self.value - self.decay_step, self.min)

    def reset(self) -> None:
        self.value = self.init

    def after_retract(self, running: list[Req]) -> None:
        decoded = sum(len(r.output_ids) for r in running)
        budget = sum(min(r.max_new_tokens, CLIP_MAX_NEW_TOKENS) for r in running) + 1
        self.value = min(1.0, max(self.value, (decoded + RETRACT_DECODE_STEPS * len(running)) / budget))


def reserved_tokens(req: Req, ratio: float, certain_ratio: float = 1.0) -> float:
    """KV tokens a running request is expected to still need: its remaining output times the
    decaying ratio, or times certain_ratio (NewTokenRatio.certain) when nothing can stop it early."""
    remaining = max(req.max_new_tokens - len(req.output_ids), 0)
    return min(remaining, CLIP_MAX_NEW_TOKENS) * (certain_ratio if runs_to_length(req) else ratio)


def runs_to_length(req: Req) -> bool:
    """Whether the request surely decodes max_new_tokens: EOS ignored, no stop strings or stop ids,
    no constraint (which ends at its accepting state). Reserving less for such requests only
    admits others that are retracted later, their prefill wasted."""
    params = req.sampling_params
    return bool(
        params.ignore_eos
        and not params.stop
        and not params.stop_token_ids
        and params.constraint is None
        and req.matcher is None
    )


class AddResult(enum.Enum):
    CONTINUE = 0  # admitted; try the next one
    NO_TOKEN = 1  # out of KV budget: stop admitting
    OTHER = 2  # input or chunk budget spent: stop admitting


class PrefillAdder:
    """Builds one prefill batch: the continuing chunked request first, then waiting requests in
    policy order, while the KV budget (free + evictable - reservations), the prefill token budget
    and the chunk budget hold. A request longer than the chunk budget is cut to a chunk."""

    def __init__(
        self,
        tree_cache,
        token_to_kv_pool,
        running: list[Req],
        new_token_ratio: float,
        max_prefill_tokens: int,
        chunk_size: Optional[int],
        certain_ratio: float = 1.0,
    ) -> None:
        self.tree_cache = tree_cache
        self.rem_total_tokens = (
            token_to_kv_pool.available_size()
            + tree_cache.evictable_size()
            - sum(reserved_tokens(r, new_token_ratio, certain_ratio) for r in running)
        )
        self.rem_input_tokens = max_prefill_tokens
        self.rem_chunk_tokens = chunk_size
        self.nothing_running = not running
        self.can_run: list[Req] = []
        self.new_chunked_req: Optional[Req] = None
        self.hit_tokens = 0
        self.input_tokens = 0

    def add_chunked_req(self, req: Req) -> None:
        """Continue a chunked prefill: its next chunk (its prefix is already in its own row)."""
        remaining = req.seq_len - req.kv_len
        chunk = remaining if self.rem_chunk_tokens is None else min(remaining, self.rem_chunk_tokens)
        req.extend_input_len = chunk
        self.can_run.append(req)
        if chunk < remaining:
            self.new_chunked_req = req
        self._spend(chunk, 0 if chunk < remaining else self._output_estimate(req))

    def add_one_req(self, req: Req) -> AddResult:
        """Try to admit `req` (already matched against the cache)."""
        input_tokens = req.extend_input_len
        if input_tokens > self.rem_input_tokens and self.can_run:
            return AddResult.OTHER
        lock_delta = self.tree_cache.inc_lock_ref(req.last_node)
        budget = self.rem_total_tokens + lock_delta
        needed = input_tokens + self._output_estimate(req)
        first = self.nothing_running and not self.can_run
        if needed > budget and not (first and input_tokens <= budget):
            self.tree_cache.dec_lock_ref(req.last_node)
            return AddResult.NO_TOKEN
        self.rem_total_tokens = budget
        if self.rem_chunk_tokens is not None and input_tokens > self.rem_chunk_tokens:
            if self.rem_chunk_tokens <= 0:
                self.tree_cache.dec_lock_ref(req.last_node)
                return AddResult.OTHER
            req.extend_input_len = input_tokens = self.rem_chunk_tokens
            self.new_chunked_req = req
            self._admit(req)
            self._spend(input_tokens, 0)
            return AddResult.OTHER
        self._admit(req)
        self._spend(input_tokens, self._output_estimate(req))
        return AddResult.CONTINUE if self.rem_input_tokens > 0 else AddResult.OTHER

    def _admit(self, req: Req) -> None:
        req.node_locked = True
        self.can_run.append(req)
        prefix_len = len(req.prefix_indices)
        if req.cached_tokens is None:
            req.cached_tokens = prefix_len
            req.queue_time = time.monotonic() - req.arrival_time
        self.hit_tokens += prefix_len

    def _spend(self, input_tokens: int, output_tokens: int) -> None:
        self.rem_total_tokens -= input_tokens + output_tokens
        self.rem_input_tokens -= input_tokens
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= input_tokens
        self.input_tokens += input_tokens

    @staticmethod
    def _output_estimate(req: Req) -> int:
        return min(max(req.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)


class InBatchPrefixes:
    """The sequences admitted into the batch being built, so that a waiting request whose prompt
    shares a long prefix with one of them is deferred to the next round (where it hits the cache
    instead of computing the same prefix twice in one forward): SGLang's in-batch prefix caching."""

    def __init__(self, disable: bool) -> None:
        self.disable = disable
        self._tree = RadixCache(disable=disable)

    def add(self, req: Req) -> None:
        if not self.disable:
            ids = req.fill_ids
            self._tree.insert(ids, torch.zeros(len(ids), dtype=torch.int64))

    def should_defer(self, req: Req) -> bool:
        """True when the batch will compute much more of `req`'s prefix than the cache holds now."""
        if self.disable:
            return False
        shared, _ = self._tree.match_prefix(req.fill_ids[: req.max_prefix_len()])
        return len(shared) - len(req.prefix_indices) >= IN_BATCH_PREFIX_MIN_SHARED
