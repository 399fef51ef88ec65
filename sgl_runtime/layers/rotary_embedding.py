"""Rotary position embedding (neox / rotate-half style), with default, linear and llama3 frequency scaling.

`rotate` is the exact torch code (the CPU path); `rotate_` rotates in place, one Triton kernel on CUDA.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from sgl_runtime.kernels import fusion
from sgl_runtime.kernels.rotary import apply_rotary_

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def rope_inv_freq(head_dim: int, params: dict[str, Any]) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in float32 for the rope_type in `params`."""
    base = float(params.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        return _llama3_scaled(inv_freq, params)
    raise ValueError(f"unsupported rope_type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")


def _llama3_scaled(inv_freq: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1: keep high frequencies, divide low ones by `factor`, interpolate smoothly in between."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_len = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """Rotary embedding shared by all layers: `cos_sin(positions)` once per forward, `rotate` per layer."""

    def __init__(self, head_dim: int, params: dict[str, Any]):
        super().__init__()
        self.head_dim = head_dim
        self.params = dict(params)
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, self.params), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the frequencies (after the module was built on the meta device and moved)."""
        self.inv_freq = rope_inv_freq(self.head_dim, self.params).to(self.inv_freq.device)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, 1, D] (float32) for absolute positions [T]."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        return emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Rotate x [T, H*D] (or [T, H, D]); returns the same shape."""
        shape = x.shape
        x = x.reshape(shape[0], -1, self.head_dim)  # [T, H, D]
        cos, sin = cos_sin[0].to(x.dtype), cos_sin[1].to(x.dtype)
        half = self.head_dim // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (x * cos + rotated * sin).view(shape)

    def rotate_(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Rotate x [T, H, D] (token/head strides free, e.g. a view into the fused qkv output) in place."""
        if fusion.use_fused_kernels(x) and x.stride(-1) == 1:
            return apply_rotary_(x, *cos_sin)
        return x.copy_(self.rotate(x, cos_sin))
