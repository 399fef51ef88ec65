"""Cascade (shared-prefix) decode attention: a prefix shared by a group of requests is read once per step.

When several requests of a decode batch share their first P KV slots (a radix-cache prefix), each
group attends to those P keys in one pass for all its members (their query heads stacked into one
tile, so the prefix's K/V come from memory once per group instead of once per request), then every
request attends to its own suffix [P, seq_len) as usual, and the two partial results are merged by
log-sum-exp. The result equals plain attention over [0, seq_len) up to float rounding.

`groups` everywhere: a list of (prefix_len, member batch indices); every member's req_to_token row
holds the same slots in [0, prefix_len) and each member has at least one key past it. The Triton
path takes them split into chunks of at most `members_per_chunk(...)` (one program tile each).
"""

from __future__ import annotations

import functools
import math

import torch

from sgl_runtime.kernels import attention_tiles as tiles
from sgl_runtime.kernels._triton import jit, next_power_of_2
from sgl_runtime.kernels.attention_tiles import LOG2E, check_kv_operands
from sgl_runtime.kernels.decode_attention import MAX_SPLITS, PREFIX_SPLITS, DecodeWorkspace

BLOCK_M = 64  # query rows (members x padded query heads of one KV head) per prefix program
BLOCK_N = 64


# ---------------------------------------------------------------------------- torch reference
def attention_with_lse_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [M, H, D] attends every key of k, v [S, Hkv, D] -> (out [M, H, D] float32, lse [M, H] natural log)."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, 1)  # [S, H, D]
    v = v.float().repeat_interleave(group, 1)  # [S, H, D]
    scores = torch.einsum("mhd,shd->mhs", q.float(), k) * scale  # [M, H, S]
    lse = torch.logsumexp(scores, -1)  # [M, H]
    return torch.einsum("mhs,shd->mhd", (scores - lse[..., None]).exp(), v), lse


def merge_attention_states_torch(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    """Attention over keys A and B from the results over each ([M, H, D] float32, lse [M, H])."""
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = (lse_a - m).exp()[..., None], (lse_b - m).exp()[..., None]
    return (out_a * w_a + out_b * w_b) / (w_a + w_b)


def cascade_decode_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: list[int],
    groups: list[tuple[int, list[int]]],
    scale: float,
) -> torch.Tensor:
    """Reference: q [B, H, D]; request b attends its seq_lens[b] keys, a group's shared prefix once for
    all its members. Returns [B, H, D] in q's dtype."""
    out = torch.empty_like(q)
    kv_start = prefix_starts(groups, len(seq_lens), seq_lens)
    prefix_part: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for prefix_len, members in groups:
        slots = req_to_token[req_pool_indices[members[0]], :prefix_len].long()
        o, lse = attention_with_lse_torch(q[members], k_buffer[slots], v_buffer[slots], scale)  # one read per group
        for i, b in enumerate(members):
            prefix_part[b] = (o[i], lse[i])
    for b, seq_len in enumerate(seq_lens):
        slots = req_to_token[req_pool_indices[b], kv_start[b] : seq_len].long()
        o, lse = attention_with_lse_torch(q[b : b + 1], k_buffer[slots], v_buffer[slots], scale)
        if b in prefix_part:
            o_p, lse_p = prefix_part[b]
            o = merge_attention_states_torch(o, lse, o_p[None], lse_p[None])
        out[b] = o[0].to(q.dtype)
    return out


# ---------------------------------------------------------------------------- host-side planning
def prefix_starts(groups: list[tuple[int, list[int]]], batch_size: int, seq_lens: list[int] | None = None) -> list[int]:
    """[B]: where each request's own suffix starts (its group's prefix length, 0 outside every group)."""
    starts = [0] * batch_size
    for prefix_len, members in groups:
        for b in members:
            assert starts[b] == 0, f"request {b} is in two shared-prefix groups"
            assert seq_lens is None or 0 < prefix_len < seq_lens[b], (prefix_len, seq_lens[b])
            starts[b] = prefix_len
    return starts


def members_per_chunk(heads: int, kv_heads: int) -> int:
    """Requests whose query heads (of one KV head, padded to a power of two) fill one BLOCK_M tile."""
    return max(1, BLOCK_M // next_power_of_2(heads // kv_heads))


def split_groups(groups: list[tuple[int, list[int]]], max_members: int) -> list[tuple[int, list[int]]]:
    """Groups cut into near-equal chunks of at most max_members (each chunk reads the prefix once);
    a chunk of one would gain nothing, so a group of one is dropped."""
    chunks = []
    for prefix_len, members in groups:
        if len(members) < 2:
            continue
        pieces = math.ceil(len(members) / max_members)
        size = math.ceil(len(members) / pieces)
        chunks.extend((prefix_len, members[i : i + size]) for i in range(0, len(members), size))
    return [c for c in chunks if len(c[1]) >= 2]


# ---------------------------------------------------------------------------- Triton launch
def shared_prefix_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    chunk_prefix: torch.Tensor,
    chunk_members: torch.Tensor,
    workspace: DecodeWorkspace,
    scale: float,
    num_warps: int = 4,
    num_stages: int = 3,
    block_n: int = BLOCK_N,
) -> None:
    """Stage 0 of cascade decode: program (chunk c, KV head g, split s) attends the query heads of every
    member of chunk c to its split of the chunk's shared prefix, writing each member's partial output
    and log-sum-exp into the workspace's prefix columns (read by decode_attention's stage 2).
    chunk_prefix [C] (0: an unused chunk, its programs do nothing), chunk_members [C, MEMBERS] (batch
    indices, -1 unused). C is the grid size, so a CUDA graph may capture a fixed C and fill fewer."""
    check_kv_operands(q, k_buffer, v_buffer, req_to_token)
    batch, heads, dim = q.shape
    kv_heads = k_buffer.shape[1]
    members = chunk_members.shape[1]
    group_pad = next_power_of_2(heads // kv_heads)
    assert members == members_per_chunk(heads, kv_heads), (members, heads, kv_heads)
    assert chunk_prefix.shape == (chunk_members.shape[0],) and chunk_members.is_contiguous()
    assert workspace.cascade and batch <= workspace.max_batch, "shared_prefix_attention needs a cascade workspace"
    num_chunks = chunk_prefix.shape[0]
    if batch == 0 or num_chunks == 0:
        return
    _kernel()[(num_chunks, kv_heads, PREFIX_SPLITS)](
        q,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        chunk_prefix,
        chunk_members,
        workspace.mid_out,
        workspace.mid_lse,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        req_to_token.stride(0),
        *workspace.strides(),
        GROUP=heads // kv_heads,
        GROUP_PAD=group_pad,
        MEMBERS=members,
        BLOCK=max(16, members * group_pad),
        KV_HEADS=kv_heads,
        D=dim,
        BLOCK_N=block_n,
        SPLITS=PREFIX_SPLITS,
        FIRST_COLUMN=MAX_SPLITS,
        num_warps=num_warps,
        num_stages=num_stages,
    )


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton.language as tl

    @jit(do_not_specialize_on_alignment=["req_pool_indices", "chunk_prefix", "chunk_members"])
    def _prefix_stage(
        q,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        chunk_prefix,
        chunk_members,
        mid_out,
        mid_lse,
        qk_scale,
        stride_qb,
        stride_qh,
        stride_rt,
        stride_mob,
        stride_moh,
        stride_mos,
        stride_mlb,
        stride_mlh,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        MEMBERS: tl.constexpr,
        BLOCK: tl.constexpr,
        KV_HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_N: tl.constexpr,
        SPLITS: tl.constexpr,
        FIRST_COLUMN: tl.constexpr,
    ):
        chunk = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        prefix_len = tl.load(chunk_prefix + chunk).to(tl.int32)
        offs_m = tl.arange(0, BLOCK)  # row m: member m // GROUP_PAD, query head m % GROUP_PAD of this KV head
        slot_m = offs_m // GROUP_PAD
        g = offs_m % GROUP_PAD
        member = tl.load(chunk_members + chunk * MEMBERS + slot_m, mask=slot_m < MEMBERS, other=-1)
        valid = (member >= 0) & (g < GROUP)  # an unused chunk has no members
        b = tl.where(valid, member, 0).to(tl.int64)
        first = tl.load(chunk_members + chunk * MEMBERS)
        row = tl.load(req_pool_indices + tl.where(first >= 0, first, 0)).to(tl.int64)  # members share these slots
        split_len = tl.cdiv(tl.cdiv(prefix_len, SPLITS), BLOCK_N) * BLOCK_N
        lo = split * split_len
        hi = tl.minimum(lo + split_len, prefix_len)

        offs_d = tl.arange(0, D)
        heads = kv_head * GROUP + g
        q_tile = tl.load(
            q + b[:, None] * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=valid[:, None], other=0.0
        )  # [BLOCK, D]
        out, lse = tiles.attend_range(
            q_tile,
            k_buffer,
            v_buffer,
            req_to_token + row * stride_rt,
            lo,
            hi,
            kv_head,
            qk_scale,
            BLOCK,
            KV_HEADS,
            D,
            BLOCK_N,
        )  # [BLOCK, D], [BLOCK]
        column = FIRST_COLUMN + split
        tl.store(
            mid_out + b[:, None] * stride_mob + heads[:, None] * stride_moh + column * stride_mos + offs_d[None, :],
            out,
            mask=valid[:, None],
        )
        tl.store(mid_lse + b * stride_mlb + heads * stride_mlh + column, lse, mask=valid)

    return _prefix_stage
