"""RMSNorm in one kernel, and residual-add + RMSNorm in one kernel (Triton), beside their torch references.

The torch model takes ~7 launches per norm and one more per residual add; these take one each.
`sgl_runtime/layers/layernorm.py` calls them for CUDA tensors (see `kernels/fusion.py`).
"""

from __future__ import annotations

import functools

import torch

from sgl_runtime.kernels._triton import next_power_of_2


def rmsnorm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Reference (as layers/layernorm.py): float32 statistics, cast back, times weight."""
    dtype = x.dtype
    x32 = x.to(torch.float32)
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)


def fused_add_rmsnorm_torch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: new_residual = x + residual (rounded to x's dtype); returns (rmsnorm(new_residual), new_residual)."""
    new_residual = x + residual
    return rmsnorm_torch(new_residual, weight, eps), new_residual


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, N] or [T, H, N] (token/head strides free, columns dense), weight [N] -> new contiguous tensor."""
    assert x.dim() in (2, 3) and weight.shape == (x.shape[-1],), (x.shape, weight.shape)
    assert x.stride(-1) == 1 and weight.is_contiguous(), "columns must be dense"
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    heads, stride_h = (x.shape[1], x.stride(1)) if x.dim() == 3 else (1, 0)
    rows = out.numel() // x.shape[-1]
    if rows == 0:
        return out
    _launch(rows, x, x, None, out, weight, x.stride(0), stride_h, heads, eps, x.shape[-1])
    return out


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [T, N] (rows may be strided) -> (normed [T, N], new_residual [T, N]), both new tensors."""
    assert x.dim() == 2 and residual.shape == x.shape and weight.shape == (x.shape[1],), (x.shape, residual.shape)
    assert x.stride(1) == 1 and residual.stride(1) == 1 and weight.is_contiguous(), "columns must be dense"
    assert residual.dtype == x.dtype, (x.dtype, residual.dtype)
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if x.shape[0] == 0:
        return out, new_residual
    _launch(
        x.shape[0],
        x,
        residual,
        new_residual,
        out,
        weight,
        x.stride(0),
        residual.stride(0),
        1,
        eps,
        x.shape[1],
        add=True,
    )
    return out, new_residual


def _launch(
    rows: int,
    x,
    residual,
    new_residual,
    out,
    weight,
    stride_a: int,
    stride_b: int,
    heads: int,
    eps: float,
    n: int,
    add: bool = False,
) -> None:
    """One program per row. Plain norm: stride_a/stride_b are x's token/head strides; with `add`,
    they are x's and residual's row strides."""
    block = next_power_of_2(n)
    _kernel()[(rows,)](
        x,
        residual,
        new_residual if add else out,
        out,
        weight,
        stride_a,
        stride_b,
        heads,
        n,
        eps,
        ADD=add,
        BLOCK=block,
        num_warps=min(16, max(1, block // 256)),
    )


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _rmsnorm_kernel(
        x,
        residual,
        new_residual,
        out,
        weight,
        stride_a,
        stride_b,
        heads,
        n,
        eps,
        ADD: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        if ADD:
            v = tl.load(x + row * stride_a + cols, mask=mask, other=0.0).to(tl.float32)
            v += tl.load(residual + row * stride_b + cols, mask=mask, other=0.0).to(tl.float32)
            summed = v.to(new_residual.dtype.element_ty)  # rounded as the torch add rounds
            tl.store(new_residual + row * n + cols, summed, mask=mask)
            v = summed.to(tl.float32)
        else:
            offset = (row // heads) * stride_a + (row % heads) * stride_b
            v = tl.load(x + offset + cols, mask=mask, other=0.0).to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(v * v, 0) / n + eps)
        normed = (v * inv).to(x.dtype.element_ty)  # cast back before the weight, as the reference does
        w = tl.load(weight + cols, mask=mask, other=0.0)
        y = normed.to(tl.float32) * w.to(tl.float32)
        tl.store(out + row * n + cols, y.to(out.dtype.element_ty), mask=mask)

    return _rmsnorm_kernel
