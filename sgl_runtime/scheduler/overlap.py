"""Overlap scheduling: a decode step is launched before the host has read the step before it.

Without it the GPU waits at every step while the host copies the sampled ids back, appends
them, checks stop conditions and prepares the next batch. With it, one `Scheduler.step()`
  1. launches the forward of step N+1 on step N's sampled ids, still on the device
     (`ScheduleBatch.prepare(next_input_ids)`);
  2. reads step N's ids (a pinned copy behind an event, so it does not wait for step N+1),
     appends them, advances constraint matchers and checks stop conditions;
  3. samples step N+1 from its logits with the host state now exact (penalties, min_new_tokens
     and constraint masks all see token N), without waiting for it.
The host work of 2 and 3 runs while the GPU computes the forward of step N+1.

A request that finishes on step N is already in step N+1: that step's KV slot holds the
finished sequence's last token (kept, cached or freed with the rest of the request) and its
row is not sampled. Requests that need the host between forward and sampling (logprobs) run
step by step. Constrained requests with jump-forward on overlap in batches of at least
DecodePolicy.overlap_jump_forward_min_batch requests (16; smaller batches run step by step): a
request whose token N forces text (read back in step 2) is not sampled in step N+1 (whose row
computed token N's KV), and step N+2 extends it by the forced tokens, from the host, beside the
other requests' device ids: a flattened mixed extend, which the decode CUDA graphs serve. Each
forced span costs one step of latency and no host-device round trip, which pays off once the
round trip would idle the GPU for many requests (0 turns it off). In batches of at least
DecodePolicy.mix_jump_forward_min_batch requests (32) forced text runs inside the decode step
instead (step by step, no step of delay), which takes precedence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sgl_runtime.host_to_device import to_device
from sgl_runtime.scheduler.batch_result import append_sampled
from sgl_runtime.scheduler.req import Req
from sgl_runtime.scheduler.schedule_batch import ScheduleBatch


def overlappable(req: Req, jump_forward: bool, overlap_forced: bool = False) -> bool:
    """Whether the request can run in overlapped steps: it wants no logprobs (computed from the
    logits on the host) and, with jump-forward on, has no constraint (whose forced text makes its
    next step a multi-token extend) unless overlap_forced lets forced text join the chain."""
    return not req.return_logprob and (req.matcher is None or not jump_forward or overlap_forced)


def launch_forward(
    batch: ScheduleBatch,
    model_runner,
    next_input_ids: Optional[torch.Tensor] = None,
    on_device: Optional[list[bool]] = None,
) -> torch.Tensor:
    """Launch a step's forward without waiting for it; returns its logits [B, V], one row per request
    (its last new token). See ScheduleBatch.prepare for next_input_ids and on_device."""
    forward_batch = batch.prepare(next_input_ids, on_device)
    assert batch.plain_decode and len(forward_batch.logits_indices_cpu) == len(batch), "one sampling row per request"
    logits = model_runner.forward(forward_batch)
    batch.commit_forward(count_passes=False)  # a pass counts once its token is used (InflightDecode's reader)
    return logits


@dataclass
class InflightDecode:
    """A sampled decode step whose ids the host has not read yet."""

    batch: ScheduleBatch
    reqs: list[Req]  # the requests sampled (the batch's unfinished ones), row i of next_ids
    next_ids: torch.Tensor  # [len(reqs)] int64 on the device
    host_ids: torch.Tensor  # their copy (pinned on CUDA), complete once `ready` fires
    ready: Optional[torch.cuda.Event]

    @classmethod
    def sample(cls, batch: ScheduleBatch, logits: torch.Tensor, sampler) -> Optional["InflightDecode"]:
        """Sample the rows of the batch's requests that are unfinished and hold no forced tokens yet
        to compute, and start copying the ids to the host."""
        rows = [i for i, r in enumerate(batch.reqs) if not r.finished and r.seq_len == r.kv_len]
        if not rows:
            return None
        reqs = [batch.reqs[i] for i in rows]
        with torch.inference_mode():  # the logits are inference tensors, edited in place by the sampler
            if len(rows) < len(batch.reqs):
                logits = logits.index_select(0, to_device(rows, torch.int64, logits.device))
            next_ids = sampler(logits, reqs)
        if next_ids.device.type != "cuda":
            return cls(batch, reqs, next_ids, next_ids, None)
        host_ids = torch.empty(next_ids.shape, dtype=next_ids.dtype, pin_memory=True)
        host_ids.copy_(next_ids, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return cls(batch, reqs, next_ids, host_ids, ready)

    def token_ids(self) -> list[int]:
        """The sampled ids on the host; waits for this step only, not for any step launched after it."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.host_ids.tolist()

    def next_input_ids(self, keep: list[int]) -> torch.Tensor:
        """The device ids of rows `keep`, as the next step's input."""
        if len(keep) == len(self.reqs):
            return self.next_ids
        return self.next_ids.index_select(0, to_device(keep, torch.int64, self.next_ids.device))


class OverlapMixin:
    """The Scheduler's overlapped decode steps (kept apart from scheduler.py for size). Uses the
    Scheduler's queues, pools, sampler and metrics, and its _batch/_finish/_fail_batch."""

    inflight: Optional[InflightDecode]

    def _advance_inflight(self) -> bool:
        """Launch the step after the in-flight one when nothing else needs scheduling, read the
        in-flight step's tokens, then sample the new step (see scheduler/overlap.py). Returns
        whether a step was launched (else the caller schedules afresh from exact host state)."""
        previous, self.inflight = self.inflight, None
        sampled = {id(r): i for i, r in enumerate(previous.reqs)}
        live = [r for r in previous.batch.reqs if not r.finished]  # aborted since: dropped
        batch = logits = None
        if self._can_chain(live, sampled):
            on_device = [id(r) in sampled for r in live]
            for req, device in zip(live, on_device):  # the others extend by their forced tokens
                req.extend_input_len = 1 if device else req.seq_len - req.kv_len
            keep = [sampled[id(r)] for r in live if id(r) in sampled]
            batch = self._batch(live)
            try:
                logits = launch_forward(
                    batch,
                    self.model_runner,
                    previous.next_input_ids(keep) if keep else None,
                    None if all(on_device) else on_device,
                )
            except Exception as error:  # noqa: BLE001
                self._fail_batch(batch, error)
                batch = None
        try:
            self._read_back(previous)
        except Exception as error:  # noqa: BLE001
            self._fail_batch(previous.batch, error)
        if batch is None:
            return False
        self.new_token_ratio.decay()
        self.metrics.overlapped_steps += 1
        self._on_decode_launch(batch)
        try:
            self.inflight = InflightDecode.sample(batch, logits, self.sampler)
        except Exception as error:  # noqa: BLE001
            self._fail_batch(batch, error)
        return True

    def _overlappable(self, reqs: list[Req]) -> bool:
        overlap_forced = self._overlap_forced(reqs)
        return all(overlappable(r, self.decode.jump_forward, overlap_forced) for r in reqs)

    def _overlap_forced(self, reqs: list[Req]) -> bool:
        """Whether forced text may join overlapped steps of this batch: in a small batch, the step
        each forced span waits costs more than the host round trip of running it step by step."""
        min_batch = self.decode.overlap_jump_forward_min_batch
        if self.decode.mixes_jump_forward(len(reqs)):
            return False  # forced text runs inside the step, which needs the host's tokens first
        return min_batch > 0 and len(reqs) >= min_batch

    def _can_chain(self, live: list[Req], sampled: dict[int, int]) -> bool:
        """The next step serves the same requests: nobody new to admit, every running request in
        it, each either decoding its sampled token (in `sampled`) or extending by forced tokens
        it holds, and room for their KV slots without retracting."""
        if not live or len(live) != len(self.running) or self.chunked_req is not None:
            return False
        if self.waiting and len(self.running) < self.max_running_requests:
            return False  # a prefill may be admitted: schedule from host state
        if not self._overlappable(live):
            return False
        forced = [r.seq_len - r.kv_len for r in live if id(r) not in sampled]
        if any(n <= 0 for n in forced):
            return False  # unsampled yet nothing to compute (cannot happen; schedule afresh if it does)
        need = len(live) - len(forced) + sum(forced)
        return need <= self.token_to_kv_pool.available_size() + self.tree_cache.evictable_size()

    def _read_back(self, step: InflightDecode) -> None:
        """Append the step's tokens (and the text they force, with jump-forward on); requests
        finished since it was launched drop theirs."""
        added = 0
        for req, token_id in zip(step.reqs, step.token_ids()):
            if req.finished:
                continue
            req.forward_passes += 1
            added += append_sampled(req, token_id, self.decode.jump_forward)
            if req.finished:
                self._finish(req)
        self.metrics.on_tokens(added)

    def _finish_inflight(self) -> None:
        if self.inflight is not None:
            previous, self.inflight = self.inflight, None
            self._read_back(previous)

    def _on_decode_launch(self, batch: ScheduleBatch) -> None:
        """Decode-step metrics (after the batch's commit, so kv_len is each request's new length)."""
        self.metrics.on_decode_step(
            len(batch), sum(r.kv_len for r in batch.reqs), self._token_usage(), len(self.waiting)
        )
