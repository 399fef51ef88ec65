"""Tensor-parallel linear layers and embeddings (Megatron-style): column-parallel (output rows split
over the ranks), row-parallel (input columns split, one all-reduce), and the vocabulary-parallel
embedding and LM head (vocabulary rows split; the head gathers the logits).

Each layer knows which part of a full checkpoint tensor its rank holds (`source_region`), so the loader
reads only that part (`read_shard`, from a tensor or a safetensors slice)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sgl_runtime.distributed.parallel_state import TPGroup

# (dim, start, size) of a checkpoint tensor; None means the whole tensor.
Region = Optional[tuple[int, int, int]]


@dataclass(frozen=True)
class Shard:
    """One logical block of a merged column-parallel weight (q, k, v, gate, up): `units` blocks of
    `unit_size` rows (heads of head_dim rows, or single rows). Ranks split the units; with fewer units
    than ranks each rank holds one, replicated on tp_size // units ranks (KV heads)."""

    name: str
    units: int
    unit_size: int

    def local_units(self, tp_size: int) -> int:
        return self.units // tp_size if self.units >= tp_size else 1

    def source_rows(self, rank: int, tp_size: int) -> tuple[int, int]:
        """(first row, row count) of this block's full rows that `rank` holds."""
        count = self.local_units(tp_size)
        first = rank * count if self.units >= tp_size else rank * self.units // tp_size
        return first * self.unit_size, count * self.unit_size


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W's output rows split by `shards`: each rank computes its slice of y (no collective)."""

    def __init__(self, in_features: int, shards: Sequence[Shard], bias: bool, tp: TPGroup) -> None:
        super().__init__()
        self.shards = {s.name: s for s in shards}
        self.tp = tp
        self.local_sizes = {s.name: s.local_units(tp.size) * s.unit_size for s in shards}
        out = sum(self.local_sizes.values())
        self.weight = nn.Parameter(torch.empty(out, in_features))  # [sum local rows, in]
        self.bias = nn.Parameter(torch.empty(out)) if bias else None

    def shard_offsets(self) -> dict[str, tuple[int, int]]:
        """Where each block sits in this rank's output rows: name -> (offset, size)."""
        offsets, at = {}, 0
        for name, size in self.local_sizes.items():
            offsets[name], at = (at, size), at + size
        return offsets

    def source_region(self, param: str, shard: Optional[str]) -> Region:
        spec = self.shards[shard] if shard is not None else next(iter(self.shards.values()))
        return (0, *spec.source_rows(self.tp.rank, self.tp.size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # [T, in] -> [T, local out]


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x_r W_r^T (+ b once): each rank holds in_features // tp_size input columns
    and its input's matching slice (a column-parallel layer's output); one all-reduce per call."""

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TPGroup) -> None:
        super().__init__()
        if in_features % tp.size:
            raise ValueError(f"tp_size {tp.size} does not divide the input size {in_features}")
        self.tp = tp
        self.local_in = in_features // tp.size
        self.weight = nn.Parameter(torch.empty(out_features, self.local_in))  # [out, in / tp]
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None

    def source_region(self, param: str, shard: Optional[str]) -> Region:
        return (1, self.tp.rank * self.local_in, self.local_in) if param == "weight" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.tp.all_reduce(F.linear(x, self.weight))  # [T, in / tp] -> [T, out], summed over ranks
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rows [start, end) of the vocabulary on each rank (padded to ceil(V / tp) rows); a token's
    embedding comes from the rank that holds it, the others add zeros (one all-reduce)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, tp: TPGroup) -> None:
        super().__init__()
        self.tp = tp
        self.num_embeddings = num_embeddings
        self.rows_per_rank = -(-num_embeddings // tp.size)
        self.start = tp.rank * self.rows_per_rank
        self.end = min(num_embeddings, self.start + self.rows_per_rank)
        self.pad_rows = self.rows_per_rank - max(0, self.end - self.start)
        self.weight = nn.Parameter(torch.empty(self.rows_per_rank, embedding_dim))  # [V / tp, hidden]

    def source_region(self, param: str, shard: Optional[str]) -> Region:
        return (0, self.start, max(0, self.end - self.start))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        here = (input_ids >= self.start) & (input_ids < self.end)  # [T]
        local = torch.where(here, input_ids - self.start, 0)
        out = F.embedding(local, self.weight) * here.unsqueeze(-1).to(self.weight.dtype)  # [T, hidden]
        return self.tp.all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """The vocabulary-parallel output projection (same rows as the embedding, so tied weights share it):
    each rank scores its rows, then the logits are gathered and the padding cut off."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        local = F.linear(hidden, self.weight)  # [L, V / tp]
        return self.tp.all_gather_last(local)[..., : self.num_embeddings]  # [L, V]


def read_shard(module: nn.Module, param: str, shard: Optional[str], source) -> torch.Tensor:
    """The part of a checkpoint tensor (a torch.Tensor, or a safetensors slice read lazily) that
    `module`'s parameter `param` holds on this rank; vocabulary shards come zero-padded to full size."""
    region = module.source_region(param, shard) if hasattr(module, "source_region") else None
    if region is None:
        return source[:]
    dim, start, size = region
    tensor = source[(slice(None),) * dim + (slice(start, start + size),)]
    pad = getattr(module, "pad_rows", 0)
    return F.pad(tensor, (0, 0, 0, pad)) if pad else tensor
