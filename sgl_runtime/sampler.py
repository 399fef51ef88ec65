"""Batched next-token sampling on the logits' device: penalties, constraint masks, temperature,
top-k / top-p / min-p and per-request seeds.

Sampling uses the exponential-race form of the categorical draw: ``argmax(p / E)`` with
``E ~ Exp(1)`` picks token i with probability ``p_i``. Requests with a seed draw their
noise row from their own generator, so a seeded request reproduces regardless of which
other requests share its batch; the rest share one draw.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from sgl_runtime.penalties import apply_penalties_, mask_stop_tokens_


class Sampler:
    """Turns one logits row per request into one token id per request."""

    def __call__(self, logits: torch.Tensor, reqs: Sequence) -> torch.Tensor:
        """logits: [B, V] float (modified in place); returns [B] int64 token ids on the same device."""
        apply_penalties_(logits, reqs)
        mask_stop_tokens_(logits, reqs)
        apply_constraints_(logits, reqs)
        greedy = [r.sampling_params.is_greedy for r in reqs]
        if all(greedy):
            return logits.argmax(dim=-1)
        sampled = self._sample(logits, reqs)
        if any(greedy):
            mask = torch.tensor(greedy, device=logits.device)
            sampled = torch.where(mask, logits.argmax(dim=-1), sampled)
        return sampled

    def _sample(self, logits: torch.Tensor, reqs: Sequence) -> torch.Tensor:
        dev = logits.device
        temps = torch.tensor([r.sampling_params.temperature or 1.0 for r in reqs], dtype=torch.float32, device=dev)
        probs = torch.softmax(logits.float() / temps[:, None], dim=-1)  # [B, V]
        noise = _exponential_noise(probs, reqs)
        if not any(_needs_filter(r.sampling_params) for r in reqs):
            return (probs / noise).argmax(dim=-1)
        probs_sorted, order = probs.sort(dim=-1, descending=True)  # [B, V] each
        _filter_sorted_probs_(probs_sorted, reqs)
        noise_sorted = noise.gather(1, order)
        choice = (probs_sorted / noise_sorted).argmax(dim=-1, keepdim=True)  # [B, 1]
        return order.gather(1, choice).squeeze(1)


def _needs_filter(params) -> bool:
    return params.top_p < 1.0 or params.top_k > 0 or params.min_p > 0.0


def _filter_sorted_probs_(probs_sorted: torch.Tensor, reqs: Sequence) -> None:
    """Zero the tail outside top-k, outside the top-p nucleus and below min_p * p_max (sorted rows)."""
    dev = probs_sorted.device
    vocab = probs_sorted.shape[-1]
    top_p = torch.tensor([r.sampling_params.top_p for r in reqs], dtype=torch.float32, device=dev)
    top_k = torch.tensor([r.sampling_params.top_k if r.sampling_params.top_k > 0 else vocab for r in reqs], device=dev)
    min_p = torch.tensor([r.sampling_params.min_p for r in reqs], dtype=torch.float32, device=dev)
    cumulative = probs_sorted.cumsum(dim=-1)
    outside_p = (cumulative - probs_sorted) > top_p[:, None]
    outside_k = torch.arange(vocab, device=dev)[None, :] >= top_k[:, None]
    below_min_p = probs_sorted < (probs_sorted[:, :1] * min_p[:, None])
    probs_sorted.masked_fill_(outside_p | outside_k | below_min_p, 0.0)


def _exponential_noise(probs: torch.Tensor, reqs: Sequence) -> torch.Tensor:
    noise = torch.empty_like(probs).exponential_()
    for i, req in enumerate(reqs):
        if req.sampling_params.seed is None:
            continue
        if req.generator is None or req.generator.device != probs.device:
            req.generator = torch.Generator(device=probs.device).manual_seed(req.sampling_params.seed + req.index)
        noise[i].exponential_(generator=req.generator)
    return noise


def apply_constraints_(logits: torch.Tensor, reqs: Sequence) -> None:
    """Mask tokens that the requests' constraint matchers forbid (-inf), on the logits' device."""
    rows = [i for i, r in enumerate(reqs) if r.matcher is not None]
    if not rows:
        return
    from sgl_runtime.constrained.bitmask import apply_token_bitmask_

    width = (logits.shape[-1] + 31) // 32
    masks = np.full((len(rows), width), -1, dtype=np.int32)
    for out_row, i in enumerate(rows):
        bits = np.asarray(reqs[i].matcher.bitmask(), dtype=np.int32)
        masks[out_row, : min(width, bits.shape[0])] = bits[:width]
        if bits.shape[0] < width:  # ids past the constraint's vocabulary are never allowed
            masks[out_row, bits.shape[0] :] = 0
    index = torch.tensor(rows, dtype=torch.int64, device=logits.device)
    sub = logits[index]
    apply_token_bitmask_(sub, torch.from_numpy(masks).to(logits.device))
    logits[index] = sub

