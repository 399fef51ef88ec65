"""Batched next-token sampling on the logits' device: penalties, constraint masks, temperature,
top-k / top-p / min-p and per-request seeds.

Sampling is inverse-CDF: one uniform number per row against the row's cumulative
probabilities, so a seeded request draws its number from its own generator and reproduces
whatever else shares its batch. top-k and min-p are thresholds (top-k through `topk`, never
a full sort). top-p is exact rejection sampling: a draw is kept when the probability mass
strictly above it is below top_p; otherwise every token no more likely than the draw is
dropped (the nucleus is an upper set, so none of them can be in it) and the row draws again.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from sgl_runtime.constrained.device_table import DeviceMaskTable
from sgl_runtime.constrained.mask_workers import MaskWorkers
from sgl_runtime.host_to_device import to_device
from sgl_runtime.penalties import apply_penalties_, mask_stop_tokens_

MAX_TOP_P_ROUNDS = 64


DEFAULT_MASK_TABLE_BYTES = 256 << 20


class Sampler:
    """Turns one logits row per request into one token id per request.

    `mask_table_bytes` bounds the device table of DFA-constraint mask rows (0: every mask is built
    on the host each step). `mask_stats` counts the host time spent on constraint masks."""

    def __init__(self, mask_table_bytes: int = DEFAULT_MASK_TABLE_BYTES) -> None:
        self.staging = MaskStaging()
        self.mask_table_bytes = mask_table_bytes
        self.mask_stats = MaskStats()
        self.mask_workers = MaskWorkers()
        self._tables: dict[tuple[torch.device, int], DeviceMaskTable] = {}

    def prefetch_masks(self, reqs: Sequence) -> None:
        """Start building the host masks the next call will need (grammar masks, DFA states' first
        visits) on worker threads; call before launching the forward whose logits it samples."""
        self.mask_workers.prefetch([r.matcher for r in reqs])

    def shutdown(self) -> None:
        self.mask_workers.shutdown()

    def mask_table(self, device: torch.device, width: int) -> "DeviceMaskTable | None":
        """The device table for masks of `width` int32 words on `device` (None when turned off)."""
        if self.mask_table_bytes <= 0:
            return None
        key = (device, width)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = DeviceMaskTable(device, width, self.mask_table_bytes)
        return table

    def __call__(self, logits: torch.Tensor, reqs: Sequence) -> torch.Tensor:
        """logits: [B, V] float (modified in place); returns [B] int64 token ids on the same device."""
        if _plain_greedy(reqs):  # the common case: one argmax, no per-request tensors
            return logits.argmax(dim=-1)
        apply_penalties_(logits, reqs)
        mask_stop_tokens_(logits, reqs)
        if any(r.matcher is not None for r in reqs):
            start = time.perf_counter()
            self.mask_workers.wait()
            table = self.mask_table(logits.device, (logits.shape[-1] + 31) // 32)
            apply_constraints_(logits, reqs, self.staging, table)
            self.mask_stats.add(time.perf_counter() - start)
        greedy = [r.sampling_params.is_greedy for r in reqs]
        if all(greedy):
            return logits.argmax(dim=-1)
        sampled = self._sample(logits, reqs)
        if any(greedy):
            mask = to_device(greedy, torch.bool, logits.device)
            sampled = torch.where(mask, logits.argmax(dim=-1), sampled)
        return sampled

    def _sample(self, logits: torch.Tensor, reqs: Sequence) -> torch.Tensor:
        dev = logits.device
        temps = to_device([r.sampling_params.temperature or 1.0 for r in reqs], torch.float32, dev)
        probs = torch.softmax(logits.float() / temps[:, None], dim=-1)  # [B, V]
        allowed = _top_k_min_p(probs, reqs)  # [B, V], probs outside top-k / min-p zeroed
        tokens = _inverse_cdf(allowed, _uniforms(reqs, dev))
        top_p_rows = [i for i, r in enumerate(reqs) if r.sampling_params.top_p < 1.0]
        if top_p_rows:
            tokens = _reject_outside_top_p(probs, allowed, tokens, top_p_rows, reqs)
        return tokens


def _plain_greedy(reqs: Sequence) -> bool:
    """Greedy with no penalty, no pending min_new_tokens stop mask and no constraint, for every request
    (Req.plain_greedy; request-like objects without it take the general path)."""
    for req in reqs:
        if (
            not getattr(req, "plain_greedy", False)
            or req.matcher is not None
            or len(req.output_ids) < req.sampling_params.min_new_tokens
        ):
            return False
    return True


def _top_k_min_p(probs: torch.Tensor, reqs: Sequence) -> torch.Tensor:
    vocab = probs.shape[-1]
    top_k = [r.sampling_params.top_k if 0 < r.sampling_params.top_k < vocab else 0 for r in reqs]
    min_p = [r.sampling_params.min_p for r in reqs]
    if not any(top_k) and not any(min_p):
        return probs
    dev = probs.device
    threshold = torch.zeros(len(reqs), dtype=probs.dtype, device=dev)
    if any(top_k):
        k = to_device([max(k, 1) for k in top_k], torch.int64, dev)
        values = probs.topk(max(top_k), dim=-1).values  # [B, K] descending
        kth = values.gather(1, (k - 1)[:, None]).squeeze(1)
        threshold = torch.where(to_device(top_k, torch.int64, dev) > 0, kth, threshold)
    if any(min_p):
        floor = probs.max(dim=-1).values * to_device(min_p, probs.dtype, dev)
        threshold = torch.maximum(threshold, floor)
    return probs.masked_fill(probs < threshold[:, None], 0.0)


def _uniforms(reqs: Sequence, device) -> torch.Tensor:
    """One U[0, 1) number per row; seeded requests draw theirs from their own generator."""
    u = torch.rand(len(reqs), device=device)
    for i, req in enumerate(reqs):
        if req.sampling_params.seed is None:
            continue
        if req.generator is None or req.generator.device != u.device:
            req.generator = torch.Generator(device=u.device).manual_seed(req.sampling_params.seed + req.index)
        u[i] = torch.rand(1, generator=req.generator, device=u.device)[0]
    return u


def _inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Row-wise draw proportional to `weights` [B, V] (unnormalised, >= 0) with uniforms u [B]."""
    cdf = weights.double().cumsum(dim=-1)  # [B, V]
    target = (u.double() * cdf[:, -1])[:, None]
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=weights.shape[-1] - 1)
    bad = weights.gather(1, tokens[:, None]).squeeze(1) <= 0  # float round-off at the very end
    return torch.where(bad, weights.argmax(dim=-1), tokens)


def _reject_outside_top_p(probs, allowed, tokens, rows: list[int], reqs: Sequence) -> torch.Tensor:
    dev = probs.device
    index = to_device(rows, torch.int64, dev)
    top_p = to_device([reqs[i].sampling_params.top_p for i in rows], probs.dtype, dev)
    p_rows, work, drawn = probs[index], allowed[index].clone(), tokens[index]
    sub_reqs = [reqs[i] for i in rows]
    for _ in range(MAX_TOP_P_ROUNDS):
        p_drawn = p_rows.gather(1, drawn[:, None])  # [R, 1]
        above = p_rows > p_drawn
        rejected = (p_rows * above).sum(dim=-1) >= top_p  # [R]
        if not bool(rejected.any()):
            break
        work = torch.where(rejected[:, None] & ~above, torch.zeros_like(work), work)
        again = [j for j, r in enumerate(rejected.tolist()) if r]  # only they draw (seeded streams stay aligned)
        again_index = to_device(again, torch.int64, dev)
        drawn = drawn.clone()
        drawn[again_index] = _inverse_cdf(work[again_index], _uniforms([sub_reqs[j] for j in again], dev))
    tokens = tokens.clone()
    tokens[index] = drawn
    return tokens


def apply_constraints_(
    logits: torch.Tensor,
    reqs: Sequence,
    staging: "MaskStaging | None" = None,
    table: "DeviceMaskTable | None" = None,
) -> None:
    """Mask tokens that the requests' constraint matchers forbid (-inf), on the logits' device.

    With a device table, DFA-backed requests' masks are rows gathered by state slot on the device
    (a host copy only on a state's first visit). The other masks (grammars, budget-restricted
    masks, states past the table's budget) are cached read-only arrays: one np.stack into a
    (pinned) host buffer and one non-blocking copy. One masking op covers the whole batch
    (unconstrained rows allow all).
    """
    rows = [i for i, r in enumerate(reqs) if r.matcher is not None]
    if not rows:
        return
    from sgl_runtime.constrained.bitmask import apply_token_bitmask_

    assert sys.byteorder == "little", "packed bitmasks are read as little-endian int32 words"
    width = (logits.shape[-1] + 31) // 32
    matchers = [reqs[i].matcher for i in rows]
    slots = _table_slots(table, matchers) if table is not None else [None] * len(rows)
    on_table = [(i, s) for i, s in zip(rows, slots) if s is not None]
    if len(on_table) == len(reqs):  # the common case: one gather, no host buffer
        bitmask = table.gather(slots)  # [B, W] int32 on the device
        if logits.device.type == "cpu":
            _apply_bitmask_cpu_(logits, bitmask.numpy())
        else:
            apply_token_bitmask_(logits, bitmask)
        return
    host_tensor = (staging or MaskStaging()).host(len(reqs), width, logits.device)  # [B, W] int32
    host = host_tensor.numpy()  # shares the (pinned) memory
    masks = [m.bitmask() if s is None else None for m, s in zip(matchers, slots)]
    if not on_table and len(rows) == len(reqs) and all(m.shape == (width,) for m in masks):
        np.stack(masks, out=host)
    else:
        host.fill(-1)  # unconstrained rows: every token allowed
        for i, bits in zip(rows, masks):
            if bits is not None:
                _copy_mask(host[i], bits)
    if logits.device.type == "cpu":
        if on_table:
            host[[i for i, _ in on_table]] = table.gather([s for _, s in on_table]).numpy()
        _apply_bitmask_cpu_(logits, host)
        return
    bitmask = host_tensor.to(logits.device, non_blocking=True)
    if on_table:
        at = to_device([i for i, _ in on_table], torch.int64, logits.device)
        bitmask.index_copy_(0, at, table.gather([s for _, s in on_table]))
    apply_token_bitmask_(logits, bitmask)


def _table_slots(table: "DeviceMaskTable", matchers: list) -> list:
    """Each matcher's slot in the table (None: it needs its host mask)."""
    states = [m.table_state() if hasattr(m, "table_state") else None for m in matchers]
    return table.slots([getattr(m, "constraint", None) for m in matchers], states)


def _apply_bitmask_cpu_(logits: torch.Tensor, host: np.ndarray) -> None:
    """The CPU masking: numpy's unpackbits (little-endian words: bit i % 32 of word i // 32 is
    byte (i % 32) // 8, bit i % 8) is an order of magnitude faster than shifting int32 tensors."""
    vocab = logits.shape[-1]
    banned = np.unpackbits(np.invert(host).view(np.uint8), axis=1, count=vocab, bitorder="little")  # [B, V] 0/1
    logits.masked_fill_(torch.from_numpy(banned.view(np.bool_)), float("-inf"))


def _copy_mask(out: np.ndarray, bits: np.ndarray) -> None:
    n = min(out.shape[0], bits.shape[0])
    out[:n] = bits[:n]
    out[n:] = 0  # ids past the constraint's vocabulary are never allowed


@dataclass
class MaskStats:
    """Host time spent building and applying constraint masks, over the sampled steps that had any."""

    steps: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.steps += 1
        self.seconds += seconds

    def per_step_ms(self) -> float:
        return 1000 * self.seconds / self.steps if self.steps else 0.0


class MaskStaging:
    """A reusable host buffer for the batch's bitmasks (page-locked on CUDA, so the copy is async).

    Reuse is safe because every step waits for the previous step's sampled ids (which follow its
    mask copy on the stream) before the next step writes here; overlapped steps too."""

    def __init__(self) -> None:
        self._buffer: "torch.Tensor | None" = None

    def host(self, batch: int, width: int, device: torch.device) -> torch.Tensor:
        buf = self._buffer
        if buf is None or buf.shape[0] < batch or buf.shape[1] != width:
            pin = device.type == "cuda"
            buf = self._buffer = torch.empty((max(batch, 64), width), dtype=torch.int32, pin_memory=pin)
        return buf[:batch]
