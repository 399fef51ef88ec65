"""Turning incoming messages into scheduler requests: validation, n > 1 fan-out, and waiting for
constraint compilation off the critical path."""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Optional

from sgl_runtime.io_struct import TokenizedGenerateReqInput
from sgl_runtime.sampling_params import SamplingParams
from sgl_runtime.scheduler.batch_result import jump_forward_
from sgl_runtime.scheduler.req import Req

logger = logging.getLogger(__name__)


def validate_request(
    msg: TokenizedGenerateReqInput, context_length: int, vocab_size: int, max_total_tokens: int
) -> Optional[str]:
    """A message naming what is wrong with the request, or None."""
    ids = msg.input_ids
    if not ids:
        return "input_ids: the prompt is empty"
    if len(ids) >= context_length:
        return (
            f"input_ids: the prompt has {len(ids)} tokens, more than the context length allows ({context_length - 1})"
        )
    if len(ids) >= max_total_tokens:
        return f"input_ids: the prompt has {len(ids)} tokens, more than the KV cache holds ({max_total_tokens})"
    bad = next((t for t in ids if not isinstance(t, int) or t < 0 or t >= vocab_size), None)
    if bad is not None:
        return f"input_ids: token id {bad!r} is outside the vocabulary [0, {vocab_size})"
    if not 0 <= msg.top_logprobs_num <= vocab_size:
        return f"top_logprobs_num: must be in [0, {vocab_size}], got {msg.top_logprobs_num}"
    if msg.return_logprob and msg.logprob_start_len >= len(ids):
        return f"logprob_start_len: must be < the prompt length ({len(ids)}), got {msg.logprob_start_len}"
    bad = next((t for t in msg.token_ids_logprob or () if not isinstance(t, int) or not 0 <= t < vocab_size), None)
    if bad is not None:
        return f"token_ids_logprob: token id {bad!r} is outside the vocabulary [0, {vocab_size})"
    return None


def build_reqs(msg: TokenizedGenerateReqInput, context_length: int, eos_token_ids: frozenset, tokenizer) -> list[Req]:
    """One Req per sample (n of them), output length capped by the context length."""
    params = msg.sampling_params
    max_new = min(params.max_new_tokens, context_length - len(msg.input_ids))
    return [
        Req(
            msg.rid,
            msg.input_ids,
            params,
            index=i,
            return_logprob=msg.return_logprob,
            logprob_start_len=msg.logprob_start_len,
            top_logprobs_num=msg.top_logprobs_num,
            token_ids_logprob=msg.token_ids_logprob,
            stream=msg.stream,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new,
            tokenizer=tokenizer,
        )
        for i in range(params.n)
    ]


def failed_reqs(msg: TokenizedGenerateReqInput, message: str) -> list[Req]:
    """Stand-in requests, already aborted with `message`, for a request that could not be built
    (so its client gets the error instead of waiting forever)."""
    count = getattr(msg.sampling_params, "n", 1)
    reqs = [
        Req(msg.rid, [0], SamplingParams(max_new_tokens=0), index=i)
        for i in range(count if isinstance(count, int) and 0 < count <= 1024 else 1)
    ]
    for req in reqs:
        req.abort(message)
    return reqs


def prefix_caching_req(msg: TokenizedGenerateReqInput) -> Req:
    """The hidden request that prefills (and caches) the prompt of an n > 1 request once, so that its
    n samples share the prefix instead of computing it n times in the same batch."""
    return Req(msg.rid, msg.input_ids, SamplingParams(max_new_tokens=0), hidden=True)


# The request field a constraint kind comes from, where its name differs (SGLang's `ebnf`).
CONSTRAINT_FIELDS = {"grammar": "ebnf", "gbnf": "ebnf", "lark": "ebnf"}  # gbnf/lark: ebnf, syntax forced


class ConstraintWaiter:
    """Requests whose constraint is compiling in a worker thread; released when their future is done."""

    def __init__(self, make_cache) -> None:
        self._make_cache = make_cache
        self._cache = None
        self.pending: list[Req] = []

    def start(self, wait: bool = False) -> None:
        """Create the cache and start its compile processes before the first constraint arrives
        (with `wait`, until they can compile)."""
        self._cache_now().start_workers(wait)

    def submit(self, req: Req) -> None:
        kind, spec = req.sampling_params.constraint
        req.constraint_future = self._cache_now().submit(kind, spec)
        self.pending.append(req)

    def poll(self, block: bool = False, timeout: float = 0.05) -> tuple[list[Req], list[Req]]:
        """(ready requests with their matcher set, failed requests aborted with the compile error)."""
        if block and self.pending:
            concurrent.futures.wait(
                [r.constraint_future for r in self.pending], timeout, concurrent.futures.FIRST_COMPLETED
            )
        ready, failed, still = [], [], []
        for req in self.pending:
            future = req.constraint_future
            if not future.done():
                still.append(req)
                continue
            req.constraint_future = None
            error = future.exception()
            if error is not None:
                kind = req.sampling_params.constraint[0]
                req.abort(f"sampling_params.{CONSTRAINT_FIELDS.get(kind, kind)}: {error}")
                failed.append(req)
            else:
                req.matcher = future.result().matcher()
                req.matcher.set_token_budget(req.max_new_tokens)
                ready.append(req)
        self.pending = still
        return ready, failed

    def stats(self) -> dict:
        """Compiles, cache hits, timeouts and errors so far."""
        return (
            dict(self._cache.stats)
            if self._cache is not None
            else {"compiles": 0, "hits": 0, "timeouts": 0, "errors": 0}
        )

    def shutdown(self) -> None:
        if self._cache is not None:
            self._cache.shutdown()

    def _cache_now(self):
        if self._cache is None:
            self._cache = self._make_cache()
        return self._cache

    def remove(self, rid: str) -> list[Req]:
        removed = [r for r in self.pending if r.rid == rid]
        self.pending = [r for r in self.pending if r.rid != rid]
        return removed


class IntakeMixin:
    """The Scheduler's intake (kept apart from scheduler.py for size): queueing requests, fanning out
    n > 1, and moving them on once their constraints compile. Uses the Scheduler's queues and config."""

    def _add_request(self, msg: TokenizedGenerateReqInput) -> None:
        """Queue a request; one that raises while being built or queued fails alone (its client gets
        the error), and the scheduler keeps serving the others."""
        try:
            self._queue_request(msg)
        except Exception as exc:  # noqa: BLE001 - the front half validates; this is a bug, not bad input
            logger.exception("rid=%s: cannot queue the request; failing it", msg.rid)
            self._fail_unqueued(msg, f"internal error while queueing the request: {type(exc).__name__}: {exc}")

    def _fail_unqueued(self, msg: TokenizedGenerateReqInput, message: str) -> None:
        self.abort(msg.rid)  # whatever part of it did get queued
        self.outbox = [r for r in self.outbox if r.rid != msg.rid] + failed_reqs(msg, message)

    def _queue_request(self, msg: TokenizedGenerateReqInput) -> None:
        reqs = build_reqs(msg, self.model_config.context_length, self.eos_token_ids, self.tokenizer)
        error = validate_request(
            msg, self.model_config.context_length, self.model_config.vocab_size, self.max_total_num_tokens
        )
        if error is not None:
            for req in reqs:
                req.abort(error)
            self.outbox.extend(reqs)
        elif len(reqs) > 1 and not self.tree_cache.disable:
            hidden = prefix_caching_req(msg)
            self.fanout[id(hidden)] = reqs
            self._enqueue(hidden)
        else:
            for req in reqs:
                self._enqueue(req)

    def _enqueue(self, req: Req) -> None:
        if req.sampling_params.constraint is not None and req.matcher is None:
            self.constraints.submit(req)
        else:
            self.waiting.append(req)

    def _poll_constraints(self) -> None:
        if not self.constraints.pending:
            return
        idle = not (self.waiting or self.running or self.chunked_req)
        ready, failed = self.constraints.poll(block=idle)
        self.outbox.extend(failed)
        for req in ready:
            if self.decode.jump_forward:
                jump_forward_(req)  # text forced from the start is prefilled with the prompt
            (self.outbox if req.finished else self.waiting).append(req)

    def _make_constraint_cache(self):
        from sgl_runtime.constrained.cache import ConstraintCache

        return ConstraintCache(
            self.tokenizer,
            self.model_config.vocab_size,
            sorted(self.eos_token_ids),
            max_size=self.server_args.constrained_cache_size,
            compile_timeout=self.server_args.constraint_compile_timeout,
            compile_workers=self.server_args.constraint_compile_workers,
        )
