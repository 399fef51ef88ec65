"""Rotary position embedding (neox / rotate-half style) with default, linear, dynamic-NTK, YaRN and llama3 scaling.

The frequency formulas follow transformers' `ROPE_INIT_FUNCTIONS` for the same config (the tests check
them against it). `rotate` is the exact torch code (the CPU path); `rotate_` rotates in place, one
Triton kernel on CUDA. YaRN's attention factor scales the cos/sin tables, so the kernel is unchanged.

Dynamic NTK is applied statically, as vLLM and SGLang do: the base is scaled once for the longest
context the config supports (max_position_embeddings * factor), so every position of every request
uses the same frequencies. transformers instead rescales per forward from the longest sequence in
the batch, which a KV cache cannot follow (cached keys were rotated with the old base); the two agree
for a sequence of exactly that longest length.

Per-frequency factors (`freq_factors`, llama.cpp's rope_freqs tensor of a GGUF file) divide the
frequencies the rope_type gives, as llama.cpp does: theta_i = pos * inv_freq_i / factor_i.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from sgl_runtime.kernels import fusion
from sgl_runtime.kernels.rotary import apply_rotary_

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
# rope types whose frequencies explicit per-frequency factors may divide (llama.cpp composes them by division)
FREQ_FACTOR_ROPE_TYPES = ("default", "linear")


def rope_inv_freq(head_dim: int, params: dict[str, Any]) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in float32 for the rope_type in `params`, divided by its
    `freq_factors` when it has them."""
    inv_freq = _rope_type_inv_freq(head_dim, params)
    factors = params.get("freq_factors")
    if factors is None:
        return inv_freq
    if params.get("rope_type", "default") not in FREQ_FACTOR_ROPE_TYPES:
        raise ValueError(f"rope frequency factors combine only with rope_type {' or '.join(FREQ_FACTOR_ROPE_TYPES)}")
    factors = torch.as_tensor(factors, dtype=torch.float32)
    if factors.shape != inv_freq.shape:
        raise ValueError(f"{factors.numel()} rope frequency factors for {inv_freq.numel()} frequencies")
    return inv_freq / factors


def _rope_type_inv_freq(head_dim: int, params: dict[str, Any]) -> torch.Tensor:
    base = float(params.get("rope_theta", 10000.0))
    rope_type = params.get("rope_type", "default")
    if rope_type == "dynamic":
        base = _dynamic_ntk_base(base, head_dim, params)
    inv_freq = _default_inv_freq(base, head_dim)
    if rope_type in ("default", "dynamic"):
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        return _llama3_scaled(inv_freq, params)
    if rope_type == "yarn":
        return _yarn_scaled(base, head_dim, params)
    raise ValueError(f"unsupported rope_type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")


def rope_attention_factor(params: dict[str, Any]) -> float:
    """The factor the cos/sin tables are multiplied by: YaRN's mscale (the paper's 0.1 ln(s) + 1), else 1."""
    if params.get("rope_type") != "yarn":
        return 1.0
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    factor = _yarn_factor(params)
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return _yarn_mscale(factor, float(mscale)) / _yarn_mscale(factor, float(mscale_all_dim))
    return _yarn_mscale(factor)


def _default_inv_freq(base: float, head_dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def _dynamic_ntk_base(base: float, head_dim: int, params: dict[str, Any]) -> float:
    """NTK-aware base for the longest supported sequence, max_position_embeddings * factor."""
    factor = float(params["factor"])
    max_pos = float(params["max_position_embeddings"])
    seq_len = max_pos * factor
    return base * ((factor * seq_len / max_pos) - (factor - 1)) ** (head_dim / (head_dim - 2))


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


def _yarn_factor(params: dict[str, Any]) -> float:
    if params.get("factor") is not None:
        return float(params["factor"])
    return float(params["max_position_embeddings"]) / float(_yarn_original_length(params))


def _yarn_original_length(params: dict[str, Any]) -> float:
    return float(params.get("original_max_position_embeddings") or params["max_position_embeddings"])


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_scaled(base: float, head_dim: int, params: dict[str, Any]) -> torch.Tensor:
    """YaRN: interpolate (divide by factor) the low frequencies, extrapolate the high ones, ramp in between."""
    factor = _yarn_factor(params)
    beta_fast, beta_slow = float(params.get("beta_fast") or 32), float(params.get("beta_slow") or 1)
    original = _yarn_original_length(params)

    def correction_dim(rotations: float) -> float:  # the dimension that turns `rotations` times over `original`
        return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # no singular ramp
    pos_freqs = base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the frequency, 0: interpolate it
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


class RotaryEmbedding(nn.Module):
    """Rotary embedding shared by all layers: `cos_sin(positions)` once per forward, `rotate` per layer."""

    def __init__(self, head_dim: int, params: dict[str, Any]):
        super().__init__()
        self.head_dim = head_dim
        self.params = dict(params)
        self.attention_factor = rope_attention_factor(self.params)
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, self.params), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the frequencies (after the module was built on the meta device and moved)."""
        self.inv_freq = rope_inv_freq(self.head_dim, self.params).to(self.inv_freq.device)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, 1, D] (float32, times the attention factor) for absolute positions [T]."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        cos, sin = emb.cos(), emb.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos[:, None, :], sin[:, None, :]

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
