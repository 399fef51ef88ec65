"""Applying packed token bitmasks to logits (torch; the Triton kernel on CUDA when present).

A bitmask row is int32 [ceil(V / 32)]: bit i % 32 of word i // 32 set iff token i is allowed.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

_SHIFTS: dict[torch.device, torch.Tensor] = {}


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Set logits of disallowed tokens to -inf in place; logits [B, V] float, bitmask [B, W] int32.

    Columns past W * 32 count as disallowed. Returns `logits`.
    """
    _check(logits, bitmask)
    if logits.is_cuda:
        kernel = _triton_kernel()
        if kernel is not None:
            kernel(logits, bitmask)
            return logits
    return apply_token_bitmask_torch_(logits, bitmask)


def apply_token_bitmask_torch_(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """The plain torch reference (vectorised unpacking)."""
    vocab = logits.shape[1]
    allowed = unpack_bitmask(bitmask.to(logits.device), vocab)  # [B, V] bool
    logits.masked_fill_(~allowed, float("-inf"))
    return logits


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """int32 [B, W] -> bool [B, vocab] (False past W * 32)."""
    shifts = _SHIFTS.get(bitmask.device)
    if shifts is None:
        shifts = _SHIFTS[bitmask.device] = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # [B, W, 32]
    bits = bits.reshape(bitmask.shape[0], -1).bool()  # [B, W * 32]
    if bits.shape[1] >= vocab:
        return bits[:, :vocab]
    pad = torch.zeros(bitmask.shape[0], vocab - bits.shape[1], dtype=torch.bool, device=bitmask.device)
    return torch.cat([bits, pad], dim=1)


def stack_bitmasks(
    masks: Sequence[Optional[np.ndarray]], num_words: int, device: "torch.device | str" = "cpu"
) -> torch.Tensor:
    """Per-request masks (None = unconstrained: all allowed) -> int32 [B, num_words] on `device`."""
    out = np.full((len(masks), num_words), -1, dtype=np.int32)
    for row, mask in enumerate(masks):
        if mask is not None:
            if mask.shape != (num_words,):
                raise ValueError(f"bitmask {row} has shape {mask.shape}, expected ({num_words},)")
            out[row] = mask
    tensor = torch.from_numpy(out)
    return tensor.to(device, non_blocking=True) if str(device) != "cpu" else tensor


def _check(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    if logits.dim() != 2 or bitmask.dim() != 2 or logits.shape[0] != bitmask.shape[0]:
        raise ValueError(
            f"expected logits [B, V] and bitmask [B, W], got {tuple(logits.shape)} and {tuple(bitmask.shape)}"
        )
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32, got {bitmask.dtype}")


def _triton_kernel():
    try:
        from sgl_runtime.kernels import bitmask_triton
    except ImportError:
        return None
    return getattr(bitmask_triton, "apply_token_bitmask_", None)
