"""Shared-prefix groups -> the index tensors cascade decode attention reads, eagerly or under CUDA graphs.

Eager decode gets tensors of the batch's exact sizes (one staging copy). A CUDA graph captures the
cascade launches at a fixed grid over static buffers: `static(bs)` hands out their views at capture
and `fill(...)` rewrites them before each replay (chunks past the graph's capacity, the smallest
savings first, simply stay out of the cascade: their requests attend their whole context).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from sgl_runtime.host_to_device import to_device
from sgl_runtime.kernels.cascade_attention import members_per_chunk, prefix_starts, split_groups

GRAPH_MIN_BATCH = 16  # smaller graphs capture no cascade launch (their few requests gain little)


def graph_chunks_for(batch_size: int) -> int:
    """Chunks a graph of `batch_size` rows has room for (unused ones cost an empty program each)."""
    return max(1, batch_size // 8)


@dataclass
class CascadeTensors:
    kv_start: torch.Tensor  # [B] int32: where each request's own suffix starts (0: outside every chunk)
    chunk_prefix: torch.Tensor  # [C] int32: the chunk's shared prefix length (0: unused chunk)
    chunk_members: torch.Tensor  # [C, M] int32: batch indices, -1 unused


class CascadePlanner:
    """Turns ForwardBatch.shared_prefix_groups into CascadeTensors for a model's head layout."""

    def __init__(self, heads: int, kv_heads: int, device, max_batch: int) -> None:
        self.members = members_per_chunk(heads, kv_heads)
        self.device = device
        self.max_batch = max_batch
        self.max_chunks = graph_chunks_for(max_batch)
        self._static: Optional[torch.Tensor] = None
        self._static_clean = True  # the static buffers hold no chunk

    def chunks(self, groups: list[tuple[int, list[int]]], limit: Optional[int] = None) -> list[tuple[int, list[int]]]:
        """Groups cut into tiles of at most `members` requests, largest savings first, at most `limit`."""
        chunks = split_groups(groups, self.members)
        chunks.sort(key=lambda c: (len(c[1]) - 1) * c[0], reverse=True)
        return chunks if limit is None else chunks[:limit]

    def eager(self, groups: Optional[list[tuple[int, list[int]]]], batch_size: int) -> Optional[CascadeTensors]:
        chunks = self.chunks(groups) if groups else []
        if not chunks:
            return None
        host = self._pack(chunks, batch_size, len(chunks))
        return self._views(to_device(torch.from_numpy(host), torch.int32, self.device), batch_size, len(chunks))

    def static(self, batch_size: int) -> CascadeTensors:
        """Views of the static buffers for a graph of `batch_size` rows (captured kernels read them)."""
        if batch_size > self.max_batch:
            raise ValueError(f"a graph of {batch_size} rows exceeds the cascade buffers' {self.max_batch}")
        buffer = self._static_buffer()
        kv_start = buffer[:batch_size]
        chunks = graph_chunks_for(batch_size)
        region = buffer[self.max_batch :]
        prefix = region[:chunks]
        members = region[self.max_chunks : self.max_chunks + chunks * self.members].view(chunks, self.members)
        return CascadeTensors(kv_start, prefix, members)

    def fill(self, groups: Optional[list[tuple[int, list[int]]]], batch_size: int, padded: int) -> int:
        """Before a replay of the `padded`-row graph: the static buffers describe this batch's chunks;
        how many there are."""
        chunks = self.chunks(groups, graph_chunks_for(padded)) if groups else []
        if not chunks and self._static_clean:
            return 0
        buffer = self._static_buffer()
        host = np.zeros(buffer.shape[0], dtype=np.int32)
        members = host[self.max_batch + self.max_chunks :]
        members[:] = -1
        for c, (prefix_len, rows) in enumerate(chunks):
            host[self.max_batch + c] = prefix_len
            members[c * self.members : c * self.members + len(rows)] = rows
        host[:batch_size] = prefix_starts(chunks, batch_size)
        staged = torch.from_numpy(host)
        if buffer.is_cuda:
            staged = staged.pin_memory()  # the caching host allocator keeps it until the copy is done
        buffer.copy_(staged, non_blocking=True)
        self._static_clean = not chunks
        return len(chunks)

    # ------------------------------------------------------------------ helpers
    def _pack(self, chunks: list[tuple[int, list[int]]], batch_size: int, num_chunks: int) -> np.ndarray:
        """[kv_start (B) | chunk_prefix (C) | chunk_members (C x M)] int32 on the host."""
        host = np.full(batch_size + num_chunks * (1 + self.members), -1, dtype=np.int32)
        host[:batch_size] = prefix_starts(chunks, batch_size)
        for c, (prefix_len, rows) in enumerate(chunks):
            host[batch_size + c] = prefix_len
            base = batch_size + num_chunks + c * self.members
            host[base : base + len(rows)] = rows
        return host

    def _views(self, packed: torch.Tensor, batch_size: int, num_chunks: int) -> CascadeTensors:
        members = packed[batch_size + num_chunks :].view(num_chunks, self.members)
        return CascadeTensors(packed[:batch_size], packed[batch_size : batch_size + num_chunks], members)

    def _static_buffer(self) -> torch.Tensor:
        if self._static is None:
            size = self.max_batch + self.max_chunks * (1 + self.members)
            self._static = torch.zeros(size, dtype=torch.int32, device=self.device)
            self._static[self.max_batch + self.max_chunks :] = -1
        return self._static
