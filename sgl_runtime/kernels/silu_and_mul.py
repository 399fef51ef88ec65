"""SiLU-and-mul of a merged gate_up projection in one kernel (Triton) beside its torch reference.

The torch layer takes two launches and a [T, I] temporary (the chunk views are free);
`sgl_runtime/layers/activation.py` calls this one for CUDA tensors (see `kernels/fusion.py`).
"""

from __future__ import annotations

import functools

import torch
from torch.nn import functional as F

BLOCK = 1024


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    """Reference: x [T, 2I] (gate then up) -> silu(gate) * up [T, I]."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2I] (rows may be strided, columns dense) -> new contiguous [T, I] in x's dtype."""
    assert x.dim() == 2 and x.shape[1] % 2 == 0 and x.stride(1) == 1, (x.shape, x.stride())
    tokens, inter = x.shape[0], x.shape[1] // 2
    out = torch.empty((tokens, inter), dtype=x.dtype, device=x.device)
    if tokens == 0 or inter == 0:
        return out
    grid = (tokens, (inter + BLOCK - 1) // BLOCK)
    _kernel()[grid](x, out, x.stride(0), inter, BLOCK=BLOCK, num_warps=4)
    return out


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _silu_and_mul_kernel(x, out, stride_x, inter, BLOCK: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < inter
        gate = tl.load(x + t * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x + t * stride_x + inter + cols, mask=mask, other=0.0)
        act = (gate * tl.sigmoid(gate)).to(out.dtype.element_ty)  # rounded as torch's silu output is
        y = act.to(tl.float32) * up.to(tl.float32)
        tl.store(out + t * inter + cols, y.to(out.dtype.element_ty), mask=mask)

    return _silu_and_mul_kernel
