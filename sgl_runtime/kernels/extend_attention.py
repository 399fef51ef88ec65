"""Extend attention: each request's new tokens attend, causally, to its cached prefix (gathered
through req_to_token) plus themselves. One kernel serves plain prefill (prefix 0), prefill on a
radix-cache hit, chunked prefill and mixed multi-token (jump-forward) extends.

The new tokens' K/V are already in the pool, so every key is read through req_to_token: for request
b, key position n < seq_len[b] lives in slot req_to_token[req_pool_indices[b], n], and new token j
(absolute position prefix_len[b] + j) sees keys n <= prefix_len[b] + j.
"""

from __future__ import annotations

import functools
import math

import torch
from torch.nn import functional as F

from sgl_runtime.kernels import attention_tiles as tiles
from sgl_runtime.kernels._triton import jit
from sgl_runtime.kernels.attention_tiles import LOG2E, check_kv_operands


def extend_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: list[int],
    extend_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """Reference: per request, gather K/V and run causal SDPA. q [T, H, D] -> [T, H, D]."""
    out = torch.empty_like(q)
    heads, kv_heads = q.shape[1], k_buffer.shape[1]
    start = 0
    for i, (seq_len, ext) in enumerate(zip(seq_lens, extend_lens)):
        slots = req_to_token[req_pool_indices[i], :seq_len].long()
        k = k_buffer[slots].transpose(0, 1).float().repeat_interleave(heads // kv_heads, 0)  # [H, S, D]
        v = v_buffer[slots].transpose(0, 1).float().repeat_interleave(heads // kv_heads, 0)  # [H, S, D]
        q_i = q[start : start + ext].transpose(0, 1).float()  # [H, E, D]
        rows = torch.arange(ext, device=q.device)[:, None] + (seq_len - ext)
        mask = torch.arange(seq_len, device=q.device)[None, :] <= rows  # [E, S]
        o = F.scaled_dot_product_attention(q_i, k, v, attn_mask=mask, scale=scale)  # [H, E, D]
        out[start : start + ext] = o.transpose(0, 1).to(q.dtype)
        start += ext
    return out


def extend_attention(
    q: torch.Tensor,
    o: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_extend_len: int,
    scale: float,
    config: tuple[int, int, int, int] | None = None,
) -> None:
    """Triton launch: writes o [T, H, D]. Metadata tensors are [B] int on q's device; max_extend_len is a host int.
    config = (BLOCK_M, BLOCK_N, num_warps, num_stages) overrides the per-head-dim default."""
    num_tokens, heads, dim = q.shape
    kv_heads = k_buffer.shape[1]
    batch = req_pool_indices.shape[0]
    check_kv_operands(q, k_buffer, v_buffer, req_to_token, o)
    assert seq_lens.shape == extend_lens.shape == extend_start_loc.shape == (batch,)
    if num_tokens == 0 or batch == 0:
        return
    block_m, block_n, warps, stages = config or _config(dim)
    grid = (batch, heads, math.ceil(max_extend_len / block_m))
    _kernel()[grid](
        q,
        o,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_lens,
        extend_start_loc,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        o.stride(0),
        o.stride(1),
        req_to_token.stride(0),
        GROUP=heads // kv_heads,
        KV_HEADS=kv_heads,
        D=dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=warps,
        num_stages=stages,
    )


def _config(dim: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) per head dim."""
    if dim <= 64:
        return 64, 64, 4, 2
    if dim <= 128:  # H200, 8 x 2048 prefill, bf16: 302 TFLOP/s vs 258 for (64, 64, 4, 2) (kernel_bench)
        return 128, 64, 4, 3
    return 32, 32, 4, 1


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton.language as tl

    @jit(do_not_specialize_on_alignment=["req_pool_indices", "seq_lens", "extend_lens", "extend_start_loc"])
    def _extend_kernel(
        q,
        o,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_lens,
        extend_start_loc,
        qk_scale,
        stride_qt,
        stride_qh,
        stride_ot,
        stride_oh,
        stride_rt,
        GROUP: tl.constexpr,
        KV_HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        b = tl.program_id(0)
        head = tl.program_id(1)
        block = tl.program_id(2)
        ext_len = tl.load(extend_lens + b).to(tl.int32)
        if block * BLOCK_M >= ext_len:
            return
        seq_len = tl.load(seq_lens + b).to(tl.int32)
        prefix_len = seq_len - ext_len
        q_start = tl.load(extend_start_loc + b).to(tl.int64)
        row = tl.load(req_pool_indices + b).to(tl.int64)
        kv_head = head // GROUP

        offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)  # new-token index within the request
        offs_d = tl.arange(0, D)
        offs_n = tl.arange(0, BLOCK_N)
        m_valid = offs_m < ext_len
        q_ptrs = q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
        q_tile = tl.load(q_ptrs, mask=m_valid[:, None], other=0.0)  # [BLOCK_M, D]
        q_pos = prefix_len + offs_m  # absolute positions of the queries

        m_i, l_i, acc = tiles.start_state(BLOCK_M, D)  # [BLOCK_M], [BLOCK_M], [BLOCK_M, D]
        kv_end = tl.minimum(seq_len, prefix_len + (block + 1) * BLOCK_M)
        for start in range(0, kv_end, BLOCK_N):
            n = start + offs_n
            n_valid = n < kv_end
            visible = n_valid[None, :] & (n[None, :] <= q_pos[:, None])  # causal: [BLOCK_M, BLOCK_N]
            m_i, l_i, acc = tiles.attend_block(
                q_tile,
                k_buffer,
                v_buffer,
                req_to_token + row * stride_rt,
                n,
                n_valid,
                visible,
                kv_head,
                offs_d,
                qk_scale,
                m_i,
                l_i,
                acc,
                KV_HEADS,
                D,
            )
        out, _ = tiles.partial_result(m_i, l_i, acc, kv_end > 0)
        o_ptrs = o + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o.dtype.element_ty), mask=m_valid[:, None])

    return _extend_kernel
