"""How rank 0 tells the other tensor-parallel ranks what to run: each forward's ForwardBatch, plus the
req_to_token writes made since the one before, goes out as a small header (host lists, over the gloo
host group) and one packed int64 tensor (every device column, over the device group: NCCL on CUDA, so
it never waits for the host). The other ranks rebuild the same ForwardBatch and run the same forward."""

from __future__ import annotations

from typing import Optional

import torch

from sgl_runtime.distributed.parallel_state import TPGroup
from sgl_runtime.forward_batch import ForwardBatch, ForwardMode

STOP = "stop"
PING = "ping"  # rank 0 is idle; a broadcast to a dead rank fails, so rank 0 notices it
Writes = list[tuple[torch.Tensor, torch.Tensor]]  # (flat req_to_token cells, KV slots) per write, in order


class BatchChannel:
    """Rank 0 calls `send` before each forward (and `send_stop` at the end); the others `receive`."""

    def __init__(self, tp: TPGroup, device: str) -> None:
        self.tp = tp
        self.device = device

    def send(self, fb: ForwardBatch, writes: Writes) -> None:
        header = (
            int(fb.forward_mode),
            fb.batch_size,
            fb.seq_lens_cpu,
            fb.extend_prefix_lens_cpu,
            fb.extend_seq_lens_cpu,
            fb.logits_indices_cpu,
            fb.num_tokens,
            int(fb.logits_indices.numel()),
            [int(cells.numel()) for cells, _ in writes],
            fb.shared_prefix_groups,
        )
        self.tp.broadcast_object(header)
        columns = [
            fb.input_ids,
            fb.positions,
            fb.req_pool_indices,
            fb.seq_lens,
            fb.extend_prefix_lens,
            fb.extend_seq_lens,
            fb.extend_start_loc,
            fb.out_cache_loc,
            fb.logits_indices,
        ]
        columns += [cells for cells, _ in writes] + [slots for _, slots in writes]
        self.tp.broadcast(torch.cat([c.to(self.device, torch.int64) for c in columns]))  # [3T + 5B + L + 2W]

    def send_stop(self) -> None:
        self.tp.broadcast_object(STOP)

    def send_ping(self) -> None:
        self.tp.broadcast_object(PING)

    def receive(self) -> Optional[tuple[ForwardBatch, Writes]]:
        """The next forward and the table writes before it; None when rank 0 stops."""
        header = self.tp.broadcast_object()
        while header == PING:
            header = self.tp.broadcast_object()
        if header == STOP:
            return None
        mode, bs, seq_lens_cpu, prefix_cpu, ext_cpu, logits_cpu, num_tokens, num_logits, write_sizes, groups = header
        sizes = [num_tokens, num_tokens] + [bs] * 5 + [num_tokens, num_logits] + write_sizes * 2
        packed = self.tp.broadcast(torch.empty(sum(sizes), dtype=torch.int64, device=self.device))
        parts = list(packed.split(sizes))
        ids, positions, rows, seq_lens, prefix, ext, starts, out_cache_loc, logits = parts[:9]
        count = len(write_sizes)
        writes = list(zip(parts[9 : 9 + count], parts[9 + count :]))
        batch = ForwardBatch(
            forward_mode=ForwardMode(mode),
            batch_size=bs,
            input_ids=ids,
            positions=positions,
            req_pool_indices=rows,
            seq_lens=seq_lens,
            extend_prefix_lens=prefix,
            extend_seq_lens=ext,
            extend_start_loc=starts,
            out_cache_loc=out_cache_loc,
            seq_lens_cpu=seq_lens_cpu,
            extend_prefix_lens_cpu=prefix_cpu,
            extend_seq_lens_cpu=ext_cpu,
            logits_indices=logits,
            logits_indices_cpu=logits_cpu,
            shared_prefix_groups=groups,
        )
        return batch, writes
