"""Writing the new tokens' K and V into their KV-pool slots (Triton kernel + torch reference)."""

from __future__ import annotations

import functools

import torch

from sgl_runtime.kernels._triton import jit, next_power_of_2


def store_kv_torch(
    k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """Reference: k_buffer[loc] = k; v_buffer[loc] = v (buffers [S, Hkv, D], k/v [T, Hkv, D], loc [T])."""
    k_buffer[loc] = k.to(k_buffer.dtype)
    v_buffer[loc] = v.to(v_buffer.dtype)


def store_kv(
    k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """Triton launch of the same write: one program per token copies its K and V rows."""
    num_tokens, heads, dim = k.shape
    assert v.shape == k.shape and loc.shape == (num_tokens,), (k.shape, v.shape, loc.shape)
    assert k_buffer.shape[1:] == (heads, dim) and v_buffer.shape == k_buffer.shape, (k_buffer.shape, k.shape)
    assert k_buffer.is_contiguous() and v_buffer.is_contiguous(), "KV buffers must be contiguous"
    assert k.stride(2) == 1 and v.stride(2) == 1 and k.stride(1) == dim and v.stride(1) == dim, "K/V rows must be dense"
    if num_tokens == 0:
        return
    _kernel()[(num_tokens,)](
        k_buffer,
        v_buffer,
        loc,
        k,
        v,
        k.stride(0),
        v.stride(0),
        ROW=heads * dim,
        BLOCK=next_power_of_2(heads * dim),
    )


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton.language as tl

    @jit(do_not_specialize_on_alignment=["loc"])
    def _store_kv_kernel(k_buffer, v_buffer, loc, k, v, stride_k, stride_v, ROW: tl.constexpr, BLOCK: tl.constexpr):
        token = tl.program_id(0)
        slot = tl.load(loc + token).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < ROW
        k_row = tl.load(k + token.to(tl.int64) * stride_k + offs, mask=mask)
        v_row = tl.load(v + token.to(tl.int64) * stride_v + offs, mask=mask)
        tl.store(k_buffer + slot * ROW + offs, k_row.to(k_buffer.dtype.element_ty), mask=mask)
        tl.store(v_buffer + slot * ROW + offs, v_row.to(v_buffer.dtype.element_ty), mask=mask)

    return _store_kv_kernel
