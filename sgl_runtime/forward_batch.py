"""The per-forward metadata handed explicitly from the ModelRunner to the model and attention.

Contract (shared by models/, layers/attention, model_runner, kernels/):

* EXTEND: every request i appends ``extend_seq_lens[i]`` new tokens on top of
  ``extend_prefix_lens[i]`` tokens whose KV is already in the pool. This one mode serves plain
  prefill (prefix 0), prefill on a radix-cache hit, chunked prefill, and mixed batches where
  some requests decode one token while others jump forward several.
* DECODE: every request appends exactly one token (extend_seq_lens all 1); backends may use a
  split-KV decode kernel and the runner may replay a CUDA graph.

Token-major tensors are ordered request by request: the new tokens of request 0, then of
request 1, and so on.  KV slot indices for request i, position p are
``req_to_token[req_pool_indices[i], p]``; the new tokens' slots are ``out_cache_loc`` and
the runner has already written them into req_to_token before the forward.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Optional

import torch


class ForwardMode(enum.IntEnum):
    EXTEND = 1
    DECODE = 2

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_extend(self) -> bool:
        return self == ForwardMode.EXTEND


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor  # [T] int64, T = sum(extend_seq_lens)
    positions: torch.Tensor  # [T] int64, absolute positions of the new tokens
    req_pool_indices: torch.Tensor  # [B] int64 rows of req_to_token
    seq_lens: torch.Tensor  # [B] int64, prefix + new tokens
    extend_prefix_lens: torch.Tensor  # [B] int64
    extend_seq_lens: torch.Tensor  # [B] int64 (all ones in DECODE)
    extend_start_loc: torch.Tensor  # [B] int64, offset of request i's first new token in [T]
    out_cache_loc: torch.Tensor  # [T] int64 KV slots for the new tokens
    # Host mirrors, so backends and the runner need no device->host sync.
    seq_lens_cpu: list[int]
    extend_prefix_lens_cpu: list[int]
    extend_seq_lens_cpu: list[int]
    # Which rows of the hidden states need logits: [L] int64 indices into [T]. The runner
    # normally asks for each request's last token, plus whole spans where prompt logprobs
    # were requested.
    logits_indices: torch.Tensor
    logits_indices_cpu: Optional[list[int]] = None  # its host mirror, where the scheduler knows it
    # DECODE only, optional: [(prefix_len, batch indices)] of requests whose req_to_token rows hold the
    # same KV slots in [0, prefix_len) (a radix-cache prefix), for cascade attention to read once per group.
    shared_prefix_groups: Optional[list[tuple[int, list[int]]]] = None
    # Set by the runner: the attention backend (holds the KV pool) and the req->token table.
    attn_backend: Any = None
    req_to_token: Optional[torch.Tensor] = None  # [max_reqs, max_context] int32/int64

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def flat_extra_keys(forward_batch: ForwardBatch) -> int:
    """How many more keys `flatten_extend(forward_batch)` reads per layer and head than the extend:
    request i's n new tokens each read their own prefix, n*p + n(n+1)/2 keys, instead of p + n once."""
    extra = 0
    for p, n in zip(forward_batch.extend_prefix_lens_cpu, forward_batch.extend_seq_lens_cpu):
        extra += n * p + n * (n + 1) // 2 - (p + n)
    return extra


def flatten_extend(forward_batch: ForwardBatch) -> ForwardBatch:
    """The EXTEND batch as a DECODE batch of one row per new token, in the same token order.

    Row t (request i's token at position p) attends to request i's first p + 1 KV slots: its
    prefix, the new tokens before it and itself. Attention stores every row's K/V before it
    reads, so each row sees exactly what the causal extend shows it, and every row's logits
    equal the extend's for that token. The rows' logits come back for all T rows (decode
    computes every row), so callers pick forward_batch.logits_indices from them. This is what
    lets the decode CUDA graphs serve small extends: jump-forward text, mixed batches, short prefills.
    """
    num = forward_batch.num_tokens
    seq_lens_cpu = [
        p + j + 1
        for p, n in zip(forward_batch.extend_prefix_lens_cpu, forward_batch.extend_seq_lens_cpu)
        for j in range(n)
    ]
    seq_lens = forward_batch.positions + 1  # positions are absolute: token at p is KV slot p of its row
    rows = torch.repeat_interleave(forward_batch.req_pool_indices, forward_batch.extend_seq_lens, output_size=num)
    every_row = torch.arange(num, dtype=torch.int64, device=forward_batch.input_ids.device)
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=num,
        input_ids=forward_batch.input_ids,
        positions=forward_batch.positions,
        req_pool_indices=rows,
        seq_lens=seq_lens,
        extend_prefix_lens=forward_batch.positions,
        extend_seq_lens=torch.ones_like(every_row),
        extend_start_loc=every_row,
        out_cache_loc=forward_batch.out_cache_loc,
        seq_lens_cpu=seq_lens_cpu,
        extend_prefix_lens_cpu=[s - 1 for s in seq_lens_cpu],
        extend_seq_lens_cpu=[1] * num,
        logits_indices=every_row,
        logits_indices_cpu=list(range(num)),
        attn_backend=forward_batch.attn_backend,
        req_to_token=forward_batch.req_to_token,
    )
