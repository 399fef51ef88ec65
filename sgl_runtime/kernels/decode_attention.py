"""Decode attention (one new token per request) as split-KV flash-decoding with grouped query heads.

Stage 1: program (request b, KV head g, split s) reads its share of the request's K/V once and
attends all GROUP query heads that share g, writing a partial output and its log-sum-exp.
Stage 2: program (b, g) merges the splits of the GROUP query heads of KV head g. The partial buffers
have a fixed size (max batch x heads x max splits), so a CUDA graph can capture both launches.

Cascade (shared-prefix) decode, see kernels/cascade_attention.py: with `kv_start`, request b's
stage-1 programs read only keys [kv_start[b], seq_len) (its own suffix), the shared prefix
[0, kv_start[b]) having been attended once for its whole group into the workspace's PREFIX_SPLITS
extra columns; stage 2 then merges those columns too for every request whose kv_start is > 0.
"""

from __future__ import annotations

import functools

import torch

from sgl_runtime.kernels import attention_tiles as tiles
from sgl_runtime.kernels._triton import jit, next_power_of_2
from sgl_runtime.kernels.attention_tiles import LOG2E, check_kv_operands

MAX_SPLITS = 32
PREFIX_SPLITS = 4  # workspace columns MAX_SPLITS .. MAX_SPLITS + PREFIX_SPLITS: a shared prefix's partials
BLOCK_N = 64
SMALL_SPLITS_PAD = 2


def decode_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """Reference: q [B, H, D]; request b attends all its seq_lens[b] keys. Returns [B, H, D]."""
    out = torch.empty_like(q)
    group = q.shape[1] // k_buffer.shape[1]
    for b, seq_len in enumerate(seq_lens):
        slots = req_to_token[req_pool_indices[b], :seq_len].long()
        k = k_buffer[slots].float().repeat_interleave(group, 1)  # [S, H, D]
        v = v_buffer[slots].float().repeat_interleave(group, 1)  # [S, H, D]
        scores = torch.einsum("hd,shd->hs", q[b].float(), k) * scale  # [H, S]
        out[b] = torch.einsum("hs,shd->hd", scores.softmax(-1), v).to(q.dtype)
    return out


def num_splits_for(batch_size: int, kv_heads: int, num_sms: int = 132) -> int:
    """Enough (request, KV head, split) programs to fill the GPU about twice, capped at MAX_SPLITS."""
    want = -(-2 * num_sms // max(1, batch_size * kv_heads))
    return max(2, min(MAX_SPLITS, next_power_of_2(want)))


def splits_pad_for(num_splits: int) -> int:
    """Split columns a stage-2 program loads: 2 for the two splits of large batches (num_splits_for's
    minimum), else MAX_SPLITS. Two values, so the split count, which follows the batch size, compiles
    stage 2 at most twice."""
    return SMALL_SPLITS_PAD if num_splits <= SMALL_SPLITS_PAD else MAX_SPLITS


class DecodeWorkspace:
    """Fixed-size fp32 partial-result buffers for up to `max_batch` requests (CUDA-graph safe);
    with `cascade`, PREFIX_SPLITS more columns per (request, head) for shared-prefix partials."""

    def __init__(self, max_batch: int, heads: int, dim: int, device, cascade: bool = False) -> None:
        self.max_batch, self.heads, self.dim, self.cascade = max_batch, heads, dim, cascade
        columns = MAX_SPLITS + (PREFIX_SPLITS if cascade else 0)
        self.mid_out = torch.empty((max_batch, heads, columns, dim), dtype=torch.float32, device=device)
        self.mid_lse = torch.empty((max_batch, heads, columns), dtype=torch.float32, device=device)

    def strides(self) -> tuple[int, int, int, int, int]:
        """mid_out's (batch, head, column) strides and mid_lse's (batch, head) strides, as the kernels take them."""
        return (*self.mid_out.stride()[:3], *self.mid_lse.stride()[:2])


def decode_attention(
    q: torch.Tensor,
    o: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    workspace: DecodeWorkspace,
    num_splits: int,
    scale: float,
    block_n: int = BLOCK_N,
    num_warps: int = 4,
    num_stages: int = 2,
    kv_start: torch.Tensor | None = None,
    splits_pad: int | None = None,
    stage2_warps: int = 4,
) -> None:
    """Triton launches: q, o [B, H, D]; req_pool_indices, seq_lens [B] on q's device.
    block_n / num_warps / num_stages tune stage 1 (benchmarks/kernel_bench.py compares them);
    splits_pad (default: splits_pad_for(num_splits)) is how many split columns each stage-2 program loads,
    stage2_warps its warps.
    kv_start [B] (cascade; needs a cascade workspace): request b's first kv_start[b] keys were
    attended by `shared_prefix_attention` into the prefix columns; stage 1 reads the rest."""
    check_kv_operands(q, k_buffer, v_buffer, req_to_token, o)
    batch, heads, dim = q.shape
    kv_heads = k_buffer.shape[1]
    assert req_pool_indices.shape == seq_lens.shape == (batch,), (req_pool_indices.shape, seq_lens.shape)
    assert 1 <= num_splits <= MAX_SPLITS, num_splits
    assert splits_pad is None or num_splits <= splits_pad <= MAX_SPLITS, (num_splits, splits_pad)
    assert batch <= workspace.max_batch and (heads, dim) == (workspace.heads, workspace.dim), "workspace too small"
    assert kv_start is None or (workspace.cascade and kv_start.shape == (batch,)), "kv_start needs a cascade workspace"
    if batch == 0:
        return
    group = heads // kv_heads
    mid_out, mid_lse = workspace.mid_out, workspace.mid_lse
    strides = workspace.strides()
    stage1, stage2 = _kernels()
    stage1[(batch, kv_heads, num_splits)](
        q,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        seq_lens if kv_start is None else kv_start,
        mid_out,
        mid_lse,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        req_to_token.stride(0),
        num_splits,
        *strides,
        GROUP=group,
        GROUP_PAD=max(16, next_power_of_2(group)),
        KV_HEADS=kv_heads,
        D=dim,
        BLOCK_N=block_n,
        HAS_START=kv_start is not None,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    stage2[(batch, kv_heads)](
        mid_out,
        mid_lse,
        o,
        seq_lens if kv_start is None else kv_start,
        num_splits,
        *strides,
        o.stride(0),
        o.stride(1),
        GROUP=group,
        GROUP_PAD=max(2, next_power_of_2(group)),
        D=dim,
        SPLITS_PAD=splits_pad or splits_pad_for(num_splits),
        PREFIX_AT=MAX_SPLITS,
        PREFIX_COLUMNS=PREFIX_SPLITS if kv_start is not None else 0,
        num_warps=stage2_warps,
    )


@functools.lru_cache(maxsize=None)
def _kernels():
    import triton.language as tl

    @jit(
        do_not_specialize=["num_splits"],
        do_not_specialize_on_alignment=["req_pool_indices", "seq_lens", "kv_start"],
    )
    def _stage1(
        q,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        kv_start,
        mid_out,
        mid_lse,
        qk_scale,
        stride_qb,
        stride_qh,
        stride_rt,
        num_splits,
        stride_mob,
        stride_moh,
        stride_mos,
        stride_mlb,
        stride_mlh,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        KV_HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_N: tl.constexpr,
        HAS_START: tl.constexpr,
    ):
        b = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        seq_len = tl.load(seq_lens + b).to(tl.int32)
        if HAS_START:
            start_at = tl.load(kv_start + b).to(tl.int32)
        else:
            start_at = 0
        row = tl.load(req_pool_indices + b).to(tl.int64)
        # Split length rounded to whole blocks, so every split but the last is full.
        split_len = tl.cdiv(tl.cdiv(seq_len - start_at, num_splits), BLOCK_N) * BLOCK_N
        lo = start_at + split * split_len
        hi = tl.minimum(lo + split_len, seq_len)

        offs_g = tl.arange(0, GROUP_PAD)
        offs_d = tl.arange(0, D)
        heads = kv_head * GROUP + offs_g
        g_valid = offs_g < GROUP
        q_tile = tl.load(
            q + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
            mask=g_valid[:, None],
            other=0.0,
        )  # [GROUP_PAD, D]
        out, lse = tiles.attend_range(
            q_tile,
            k_buffer,
            v_buffer,
            req_to_token + row * stride_rt,
            lo,
            hi,
            kv_head,
            qk_scale,
            GROUP_PAD,
            KV_HEADS,
            D,
            BLOCK_N,
        )  # [GROUP_PAD, D], [GROUP_PAD]
        base = b.to(tl.int64) * stride_mob + split * stride_mos
        tl.store(mid_out + base + heads[:, None] * stride_moh + offs_d[None, :], out, mask=g_valid[:, None])
        tl.store(mid_lse + b.to(tl.int64) * stride_mlb + heads * stride_mlh + split, lse, mask=g_valid)

    @jit(do_not_specialize=["num_splits"], do_not_specialize_on_alignment=["kv_start"])
    def _stage2(
        mid_out,
        mid_lse,
        o,
        kv_start,
        num_splits,
        stride_mob,
        stride_moh,
        stride_mos,
        stride_mlb,
        stride_mlh,
        stride_ob,
        stride_oh,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        D: tl.constexpr,
        SPLITS_PAD: tl.constexpr,
        PREFIX_AT: tl.constexpr,
        PREFIX_COLUMNS: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        kv_head = tl.program_id(1)
        offs_g = tl.arange(0, GROUP_PAD)
        offs_s = tl.arange(0, SPLITS_PAD)
        offs_d = tl.arange(0, D)
        g_valid = offs_g < GROUP
        heads = kv_head * GROUP + offs_g
        gs_valid = g_valid[:, None] & (offs_s < num_splits)[None, :]  # [GROUP_PAD, SPLITS_PAD]
        lse_rows = mid_lse + b * stride_mlb + heads[:, None] * stride_mlh
        out_rows = mid_out + b * stride_mob + heads[:, None, None] * stride_moh
        lse = tl.load(lse_rows + offs_s[None, :], mask=gs_valid, other=float("-inf"))
        parts = tl.load(
            out_rows + offs_s[None, :, None] * stride_mos + offs_d[None, None, :],
            mask=gs_valid[:, :, None],
            other=0.0,
        )  # [GROUP_PAD, SPLITS_PAD, D]
        m = tl.max(lse, 1)
        if PREFIX_COLUMNS > 0:  # also the shared prefix's partials, where this request's group wrote them
            offs_p = tl.arange(0, PREFIX_COLUMNS)
            p_valid = offs_p < tl.where(tl.load(kv_start + b) > 0, PREFIX_COLUMNS, 0)
            gp_valid = g_valid[:, None] & p_valid[None, :]  # [GROUP_PAD, PREFIX_COLUMNS]
            lse_p = tl.load(lse_rows + PREFIX_AT + offs_p[None, :], mask=gp_valid, other=float("-inf"))
            parts_p = tl.load(
                out_rows + (PREFIX_AT + offs_p[None, :, None]) * stride_mos + offs_d[None, None, :],
                mask=gp_valid[:, :, None],
                other=0.0,
            )  # [GROUP_PAD, PREFIX_COLUMNS, D]
            m = tl.maximum(m, tl.max(lse_p, 1))
        m = tl.where(g_valid, m, 0.0)  # padding rows hold no key
        w = tl.where(gs_valid, tl.exp2(lse - m[:, None]), 0.0)
        num = tl.sum(parts * w[:, :, None], 1)  # [GROUP_PAD, D]
        den = tl.sum(w, 1)
        if PREFIX_COLUMNS > 0:
            w_p = tl.where(gp_valid, tl.exp2(lse_p - m[:, None]), 0.0)
            num += tl.sum(parts_p * w_p[:, :, None], 1)
            den += tl.sum(w_p, 1)
        out = num / tl.where(den > 0, den, 1.0)[:, None]
        o_ptrs = o + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o.dtype.element_ty), mask=g_valid[:, None])

    return _stage1, _stage2
