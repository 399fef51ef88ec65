"""The online-softmax steps of the attention kernels as Triton device functions, inlined into each kernel
(imported only through attention_tiles, once a kernel is built: importing it needs Triton). All in log2 units."""

from __future__ import annotations

import triton.language as tl

from sgl_runtime.kernels._triton import jit


@jit()
def start_state(ROWS: tl.constexpr, D: tl.constexpr):
    """Running max, running sum and accumulator before any key: ([ROWS], [ROWS], [ROWS, D]) float32."""
    m_i = tl.full([ROWS], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, D], dtype=tl.float32)
    return m_i, l_i, acc


@jit()
def attend_block(
    q_tile,
    k_buffer,
    v_buffer,
    slot_row,
    n,
    n_valid,
    visible,
    kv_head,
    offs_d,
    qk_scale,
    m_i,
    l_i,
    acc,
    KV_HEADS: tl.constexpr,
    D: tl.constexpr,
):
    """Folds keys n (positions in the request's req_to_token row `slot_row`; n_valid: inside the range)
    into the running state of q_tile [ROWS, D]; `visible` [ROWS, BLOCK_N] masks the scores."""
    slots = tl.load(slot_row + n, mask=n_valid, other=0).to(tl.int64)
    kv_off = slots[:, None] * (KV_HEADS * D) + kv_head * D + offs_d[None, :]
    k_tile = tl.load(k_buffer + kv_off, mask=n_valid[:, None], other=0.0)  # [BLOCK_N, D]
    qk = tl.dot(q_tile, tl.trans(k_tile)) * qk_scale  # [ROWS, BLOCK_N], log2 units
    qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.exp2(qk - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v_tile = tl.load(v_buffer + kv_off, mask=n_valid[:, None], other=0.0)  # [BLOCK_N, D]
    acc = acc * alpha[:, None] + tl.dot(p.to(v_tile.dtype), v_tile)
    return m_new, l_i, acc


@jit()
def partial_result(m_i, l_i, acc, has_keys):
    """(out [ROWS, D], lse [ROWS] in log2 units, -inf where the range held no key) of one pass."""
    lse = tl.where(has_keys, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    return out, lse


@jit()
def attend_range(
    q_tile,
    k_buffer,
    v_buffer,
    slot_row,
    lo,
    hi,
    kv_head,
    qk_scale,
    ROWS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """q_tile [ROWS, D] attends every key in positions [lo, hi) of the req_to_token row `slot_row` of one
    KV head: (out [ROWS, D], lse [ROWS]) as `partial_result` gives them."""
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    m_i, l_i, acc = start_state(ROWS, D)  # [ROWS], [ROWS], [ROWS, D]
    for start in range(lo, hi, BLOCK_N):
        n = start + offs_n
        n_valid = n < hi
        m_i, l_i, acc = attend_block(
            q_tile,
            k_buffer,
            v_buffer,
            slot_row,
            n,
            n_valid,
            n_valid[None, :],
            kv_head,
            offs_d,
            qk_scale,
            m_i,
            l_i,
            acc,
            KV_HEADS,
            D,
        )
    return partial_result(m_i, l_i, acc, hi > lo)
