"""Logit processors that depend on a request's history: penalties and the min_new_tokens stop mask."""

from __future__ import annotations

from typing import Sequence

import torch

from sgl_runtime.host_to_device import to_device


def apply_penalties_(logits: torch.Tensor, reqs: Sequence) -> None:
    """Frequency/presence penalties over output tokens (OpenAI semantics) and the repetition
    penalty over prompt + output tokens (CTRL / transformers semantics), in place.

    logits: [B, V], one row per request in `reqs`.
    """
    rows = [i for i, r in enumerate(reqs) if _has_count_penalty(r.sampling_params)]
    if rows:
        _apply_count_penalties_(logits, [reqs[i] for i in rows], rows)
    rows = [i for i, r in enumerate(reqs) if r.sampling_params.repetition_penalty != 1.0]
    if rows:
        _apply_repetition_penalty_(logits, [reqs[i] for i in rows], rows)
    apply_logit_bias_(logits, reqs)


def apply_logit_bias_(logits: torch.Tensor, reqs: Sequence) -> None:
    """Add each request's logit_bias (token id -> bias, OpenAI semantics) to its row, in place."""
    vocab = logits.shape[-1]
    rows: list[int] = []
    cols: list[int] = []
    biases: list[float] = []
    for i, req in enumerate(reqs):
        for token_id, bias in req.sampling_params.logit_bias:
            if token_id < vocab:
                rows.append(i)
                cols.append(token_id)
                biases.append(float(bias))
    if rows:
        index = to_device([rows, cols], torch.int64, logits.device)
        logits.index_put_((index[0], index[1]), to_device(biases, logits.dtype, logits.device), accumulate=True)


def mask_stop_tokens_(logits: torch.Tensor, reqs: Sequence) -> None:
    """Forbid EOS and stop_token_ids for requests that have not yet produced min_new_tokens
    (one index_put_ of a device tensor: assigning a Python float would sync the stream)."""
    vocab = logits.shape[-1]
    rows: list[int] = []
    cols: list[int] = []
    for i, req in enumerate(reqs):
        if len(req.output_ids) < req.sampling_params.min_new_tokens:
            ids = [t for t in (*req.eos_token_ids, *req.sampling_params.stop_token_ids) if t < vocab]
            rows += [i] * len(ids)
            cols += ids
    if rows:
        index = to_device([rows, cols], torch.int64, logits.device)
        logits.index_put_(
            (index[0], index[1]), torch.full((len(rows),), float("-inf"), device=logits.device, dtype=logits.dtype)
        )


def _has_count_penalty(params) -> bool:
    return params.frequency_penalty != 0.0 or params.presence_penalty != 0.0


def _padded_ids(id_lists: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, L] ids padded with 0 and a [R, L] float mask of real entries."""
    width = max(1, max(len(ids) for ids in id_lists))
    ids = torch.zeros((len(id_lists), width), dtype=torch.int64)
    mask = torch.zeros((len(id_lists), width), dtype=torch.float32)
    for row, values in enumerate(id_lists):
        if values:
            ids[row, : len(values)] = torch.tensor(values, dtype=torch.int64)
            mask[row, : len(values)] = 1.0
    return to_device(ids, torch.int64, device), to_device(mask, torch.float32, device)


def _apply_count_penalties_(logits: torch.Tensor, reqs: list, rows: list[int]) -> None:
    dev = logits.device
    ids, mask = _padded_ids([r.output_ids for r in reqs], dev)
    counts = torch.zeros((len(reqs), logits.shape[-1]), dtype=torch.float32, device=dev)
    counts.scatter_add_(1, ids, mask)  # counts: [R, V]
    freq = to_device([r.sampling_params.frequency_penalty for r in reqs], torch.float32, dev)
    pres = to_device([r.sampling_params.presence_penalty for r in reqs], torch.float32, dev)
    penalty = freq[:, None] * counts + pres[:, None] * (counts > 0).float()
    index = to_device(rows, torch.int64, dev)
    logits.index_copy_(0, index, logits.index_select(0, index) - penalty.to(logits.dtype))


def _apply_repetition_penalty_(logits: torch.Tensor, reqs: list, rows: list[int]) -> None:
    dev = logits.device
    ids, mask = _padded_ids([r.origin_input_ids + r.output_ids for r in reqs], dev)
    seen = torch.zeros((len(reqs), logits.shape[-1]), dtype=torch.float32, device=dev)
    seen.scatter_add_(1, ids, mask)  # seen: [R, V] > 0 where the token occurred
    penalty = to_device([r.sampling_params.repetition_penalty for r in reqs], torch.float32, dev)
    index = to_device(rows, torch.int64, dev)
    sub = logits.index_select(0, index)
    scaled = torch.where(sub > 0, sub / penalty[:, None], sub * penalty[:, None])
    logits.index_copy_(0, index, torch.where(seen > 0, scaled, sub))
