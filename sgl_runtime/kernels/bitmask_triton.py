"""Applying packed int32 token bitmasks to logits in place (Triton kernel; the torch reference is
sgl_runtime.constrained.bitmask.apply_token_bitmask_torch_).

Bit i % 32 of word i // 32 is set iff token i is allowed; columns past W * 32 are disallowed.
"""

from __future__ import annotations

import functools

import torch

from sgl_runtime.kernels._triton import jit

BLOCK = 2048


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """logits [B, V] float (rows may be strided, columns dense), bitmask [B, W] int32; returns logits."""
    batch, vocab = logits.shape
    assert bitmask.dim() == 2 and bitmask.shape[0] == batch, (logits.shape, bitmask.shape)
    assert bitmask.dtype == torch.int32 and logits.is_floating_point(), (bitmask.dtype, logits.dtype)
    assert logits.stride(1) == 1 and bitmask.stride(1) == 1, "columns must be contiguous"
    assert bitmask.device == logits.device, (bitmask.device, logits.device)
    if batch == 0:
        return logits
    grid = (batch, (vocab + BLOCK - 1) // BLOCK)
    _kernel()[grid](logits, bitmask, vocab, bitmask.shape[1], logits.stride(0), bitmask.stride(0), BLOCK=BLOCK)
    return logits


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton.language as tl

    @jit(do_not_specialize_on_alignment=["bitmask"])
    def _bitmask_kernel(logits, bitmask, vocab, words, stride_l, stride_m, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        in_vocab = cols < vocab
        word_idx = cols // 32
        word = tl.load(bitmask + row * stride_m + word_idx, mask=in_vocab & (word_idx < words), other=0)
        allowed = ((word >> (cols % 32)) & 1) != 0
        tl.store(logits + row * stride_l + cols, float("-inf"), mask=in_vocab & (~allowed))

    return _bitmask_kernel
