"""Rotary embedding (neox / rotate-half) in one kernel (Triton) beside its torch reference.

`apply_rotary_` rotates in place, so the model rotates q and k together inside the fused qkv
projection output (their heads are adjacent there) with one launch and no copies.
"""

from __future__ import annotations

import functools

import torch

from sgl_runtime.kernels._triton import next_power_of_2


def apply_rotary_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Reference: x [T, H, D]; cos, sin [T, 1, D] (the two halves equal) -> [T, H, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] (token and head strides free, dim dense); cos, sin [T, 1, D] float32 -> new [T, H, D]."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(x, cos, sin, out)
    return out


def apply_rotary_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """In place: x [T, H, D] (token and head strides free, dim dense) is overwritten and returned."""
    _launch(x, cos, sin, x)
    return x


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> None:
    tokens, heads, dim = x.shape
    assert dim % 2 == 0 and x.stride(2) == 1 and out.shape == x.shape and out.stride(2) == 1, (x.shape, x.stride())
    assert cos.shape == sin.shape == (tokens, 1, dim) and cos.stride(2) == 1 and sin.stride() == cos.stride()
    if tokens == 0:
        return
    _kernel()[(tokens,)](
        x,
        cos,
        sin,
        out,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        cos.stride(0),
        heads,
        dim // 2,
        HEADS_PAD=next_power_of_2(heads),
        HALF_PAD=next_power_of_2(dim // 2),
    )


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _rotary_kernel(
        x,
        cos,
        sin,
        out,
        stride_xt,
        stride_xh,
        stride_ot,
        stride_oh,
        stride_ct,
        heads,
        half,
        HEADS_PAD: tl.constexpr,
        HALF_PAD: tl.constexpr,
    ):
        t = tl.program_id(0).to(tl.int64)
        h = tl.arange(0, HEADS_PAD)
        d = tl.arange(0, HALF_PAD)
        mask = (h[:, None] < heads) & (d[None, :] < half)
        c = tl.load(cos + t * stride_ct + d, mask=d < half, other=0.0)[None, :]
        s = tl.load(sin + t * stride_ct + d, mask=d < half, other=0.0)[None, :]
        base = x + t * stride_xt + h[:, None] * stride_xh + d[None, :]
        x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(base + half, mask=mask, other=0.0).to(tl.float32)
        o = out + t * stride_ot + h[:, None] * stride_oh + d[None, :]  # may be x itself: loads precede stores
        tl.store(o, (x1 * c - x2 * s).to(out.dtype.element_ty), mask=mask)
        tl.store(o + half, (x2 * c + x1 * s).to(out.dtype.element_ty), mask=mask)

    return _rotary_kernel
