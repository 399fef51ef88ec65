"""RMSNorm in one kernel (Triton) beside its torch reference (the model's RMSNorm takes ~6 launches).

Not wired into sgl_runtime/layers/layernorm.py yet (MODELS helper's file): RMSNorm.forward can call
`rmsnorm(x, self.weight, self.variance_epsilon)` when x.is_cuda.
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


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, N] (rows may be strided, columns dense), weight [N] -> new [T, N] in weight/x's promoted dtype."""
    assert x.dim() == 2 and weight.shape == (x.shape[1],), (x.shape, weight.shape)
    assert x.stride(1) == 1 and weight.is_contiguous(), "columns must be dense"
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if x.shape[0] == 0:
        return out
    block = next_power_of_2(x.shape[1])
    _kernel()[(x.shape[0],)](x, weight, out, x.stride(0), out.stride(0), x.shape[1], eps,
                             BLOCK=block, num_warps=min(16, max(1, block // 256)))
    return out


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _rmsnorm_kernel(x, weight, out, stride_x, stride_o, n, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        v = tl.load(x + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(v * v, 0) / n + eps)
        normed = (v * inv).to(x.dtype.element_ty)  # cast back before the weight, as the reference does
        w = tl.load(weight + cols, mask=mask, other=0.0)
        y = normed.to(tl.float32) * w.to(tl.float32)
        tl.store(out + row * stride_o + cols, y.to(out.dtype.element_ty), mask=mask)

    return _rmsnorm_kernel
