"""Fused mixture-of-experts MLP (Triton grouped GEMM) beside its torch reference.

`fused_experts` sorts the (token, k-slot) pairs by expert into blocks of BLOCK_M rows (each block
padded within one expert), then runs two grouped GEMMs in which every program multiplies one block
of rows by its expert's weight tile: gate_up ([T*k, 2I]), SiLU-and-mul ([T*k, I], the existing
kernel), down times the routing weight ([T*k, H], float32), and sums the k slots per token.
The sort is plain torch with fixed-size outputs and no host synchronisation, so decode steps stay
CUDA-graph capturable. Triton is imported lazily: CPU installs never need it.
"""

from __future__ import annotations

import functools

import torch
from torch.nn import functional as F

from sgl_runtime.kernels.silu_and_mul import silu_and_mul


def fused_experts_torch(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
) -> torch.Tensor:
    """Reference: each token through its k experts' SiLU-gated MLPs, summed with the routing weights.
    x [T, H]; w13 [E, 2I, H] (gate rows, then up rows); w2 [E, H, I]; topk_weights, topk_ids [T, k] -> [T, H].
    While a CUDA graph is being captured (fused kernels disabled) it takes the dense form, which never
    reads the routed ids on the host."""
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return dense_experts_torch(x, w13, w2, topk_weights, topk_ids)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in topk_ids.unique().tolist():
        token, slot = torch.where(topk_ids == expert)  # the (token, k-slot) pairs routed to this expert
        gate, up = F.linear(x[token], w13[expert]).chunk(2, dim=-1)  # [n, I] each
        y = F.linear(F.silu(gate) * up, w2[expert])  # [n, H]
        out.index_add_(0, token, y.float() * topk_weights[token, slot, None].float())
    return out.to(x.dtype)


def dense_experts_torch(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
) -> torch.Tensor:
    """The same sum computed through every expert for every token (unrouted ones weighted 0): static shapes."""
    dense = torch.zeros((x.shape[0], w13.shape[0]), dtype=torch.float32, device=x.device)
    dense.scatter_(1, topk_ids, topk_weights.float())  # [T, E]
    gate, up = torch.einsum("th,enh->etn", x, w13).chunk(2, dim=-1)  # [E, T, I] each
    y = torch.einsum("eti,ehi->eth", F.silu(gate) * up, w2)  # [E, T, H]
    return (y.float() * dense.T[:, :, None]).sum(dim=0).to(x.dtype)


def fused_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: dict | None = None,
) -> torch.Tensor:
    """The same as `fused_experts_torch`, in two grouped-GEMM launches (CUDA tensors, dense rows).
    `config` overrides the tile sizes `block_config` picks (benchmarks/moe_kernel_bench.py sweeps them)."""
    tokens, hidden = x.shape
    num_experts, two_inter, _ = w13.shape
    top_k = topk_ids.shape[1]
    assert x.is_contiguous() and w13.is_contiguous() and w2.is_contiguous(), "x and expert weights must be dense"
    assert w13.shape == (num_experts, two_inter, hidden) and w2.shape == (num_experts, hidden, two_inter // 2)
    assert topk_weights.shape == topk_ids.shape == (tokens, top_k), (topk_weights.shape, topk_ids.shape)
    if tokens == 0:
        return torch.zeros_like(x)
    config = config or block_config(tokens * top_k, num_experts)
    sorted_ids, block_experts, rows_used = align_by_expert(topk_ids, num_experts, config["BLOCK_M"])
    gate_up = torch.empty((tokens * top_k, two_inter), dtype=x.dtype, device=x.device)  # row = token * k + slot
    _grouped_gemm(x, w13, gate_up, None, sorted_ids, block_experts, rows_used, top_k, config)
    act = silu_and_mul(gate_up)  # [T*k, I]
    down = torch.empty((tokens * top_k, hidden), dtype=torch.float32, device=x.device)
    _grouped_gemm(act, w2, down, topk_weights.reshape(-1).float(), sorted_ids, block_experts, rows_used, 1, config)
    return down.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)  # [T, H]


def align_by_expert(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    """Group the flattened (token, slot) rows by expert, each expert's run padded to a multiple of block_m.

    Returns sorted_ids [P] int32 (a row index, or T*k for padding), block_experts [P / block_m] int32
    (the expert of each block) and rows_used [1] int32 (P actually used; later blocks are skipped).
    P is a fixed upper bound, so the shapes depend only on T*k and the output is graph-capturable.
    """
    flat = topk_ids.reshape(-1)  # [N]
    n, device = flat.numel(), flat.device
    capacity = -(-(n + min(num_experts, n) * (block_m - 1)) // block_m) * block_m
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m  # [E]
    padded_end = padded.cumsum(0)
    order = torch.argsort(flat, stable=True)  # rows grouped by expert, in row order within one
    sorted_experts = flat[order]
    rank = torch.arange(n, device=device) - (counts.cumsum(0) - counts)[sorted_experts]  # place within its expert
    sorted_ids = torch.full((capacity,), n, dtype=torch.int32, device=device)
    sorted_ids[(padded_end - padded)[sorted_experts] + rank] = order.to(torch.int32)
    block_starts = torch.arange(0, capacity, block_m, device=device)
    block_experts = torch.searchsorted(padded_end, block_starts, right=True).clamp_(max=num_experts - 1)
    return sorted_ids, block_experts.to(torch.int32), padded_end[-1:].to(torch.int32)


def block_config(rows: int, num_experts: int) -> dict:
    """Tile sizes by rows (T*k) per expert: small blocks for decode, larger for prefill."""
    if rows <= num_experts:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=3)
    if rows <= 8 * num_experts:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=3)
    return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)


def _grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    weights,
    sorted_ids: torch.Tensor,
    block_experts: torch.Tensor,
    rows_used: torch.Tensor,
    top_k: int,
    config: dict,
) -> None:
    """c[row] = a[row // top_k] @ b[expert].T (times weights[row] when given) for the rows in sorted_ids."""
    _, n, k = b.shape
    assert a.shape[1] == k and c.shape[1] == n and a.stride(1) == 1 and c.stride(1) == 1, (a.shape, b.shape, c.shape)
    meta = dict(config)
    block_m, block_n = meta["BLOCK_M"], meta["BLOCK_N"]
    grid = (triton_cdiv(sorted_ids.numel(), block_m) * triton_cdiv(n, block_n),)
    _kernel()[grid](
        a,
        b,
        c,
        weights if weights is not None else c,
        sorted_ids,
        block_experts,
        rows_used,
        n,
        k,
        sorted_ids.numel(),
        c.shape[0],
        a.stride(0),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        TOP_K=top_k,
        MUL_WEIGHT=weights is not None,
        IEEE=a.dtype == torch.float32,
        **meta,
    )


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["capacity", "num_rows"])
    def _fused_moe_kernel(
        a,
        b,
        c,
        weights,
        sorted_ids,
        block_experts,
        rows_used,
        N,
        K,
        capacity,
        num_rows,
        stride_am,
        stride_be,
        stride_bn,
        stride_cm,
        TOP_K: tl.constexpr,
        MUL_WEIGHT: tl.constexpr,
        IEEE: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr,
    ):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(capacity, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        group = pid // (GROUP_M * num_pid_n)  # grouped order: neighbouring programs share weight tiles in L2
        first_m = group * GROUP_M
        group_size = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % (GROUP_M * num_pid_n)) % group_size
        pid_n = (pid % (GROUP_M * num_pid_n)) // group_size
        if pid_m * BLOCK_M >= tl.load(rows_used):
            return
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rows = tl.load(sorted_ids + offs_m).to(tl.int64)  # [BLOCK_M] rows of c (num_rows = padding)
        row_mask = rows < num_rows
        expert = tl.load(block_experts + pid_m).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a + (rows // TOP_K)[:, None] * stride_am + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
        b_ptrs = b + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None]  # [BLOCK_K, BLOCK_N]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(K, BLOCK_K)):
            k_mask = offs_k < K - k0 * BLOCK_K
            a_tile = tl.load(a_ptrs, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
            b_tile = tl.load(b_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0.0)
            if IEEE:  # float32 models stay exact (no TF32 rounding), as torch's matmuls do by default
                acc += tl.dot(a_tile, b_tile, input_precision="ieee")
            else:
                acc += tl.dot(a_tile, b_tile)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K
        if MUL_WEIGHT:
            acc = acc * tl.load(weights + rows, mask=row_mask, other=0.0)[:, None]
        c_ptrs = c + rows[:, None] * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=row_mask[:, None] & n_mask[None, :])

    return _fused_moe_kernel
