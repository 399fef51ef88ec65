"""The Triton attention backend (CUDA): store K/V, extend attention and split-KV decode attention.

`init_forward_metadata` does all per-batch host work once (no per-layer host syncs); in DECODE mode
it touches no device memory, so a CUDA graph can capture the whole forward.

With `cascade`, decode batches whose requests share a radix-cache prefix attend to it once per group
(kernels/cascade_attention.py): eagerly when the batch lists groups, and under CUDA graphs of
GRAPH_MIN_BATCH rows or more, whose captured launches read static buffers refilled before each replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgl_runtime.forward_batch import ForwardBatch
from sgl_runtime.kernels.cascade_attention import shared_prefix_attention
from sgl_runtime.kernels.decode_attention import DecodeWorkspace, decode_attention, num_splits_for
from sgl_runtime.kernels.extend_attention import extend_attention
from sgl_runtime.kernels.store_kv import store_kv
from sgl_runtime.layers.attention.base import AttentionBackend
from sgl_runtime.layers.attention.cascade_metadata import GRAPH_MIN_BATCH, CascadePlanner, CascadeTensors


@dataclass
class _Metadata:
    max_extend_len: int = 0
    num_splits: int = 2
    cascade: CascadeTensors | None = None


class TritonAttentionBackend(AttentionBackend):
    def __init__(
        self,
        kv_pool,
        req_to_token_pool,
        num_heads: int | None = None,
        max_batch: int | None = None,
        cascade: bool = False,
    ):
        """`cascade` needs `num_heads` (the query heads on this rank)."""
        self.kv_pool = kv_pool
        self.req_to_token_pool = req_to_token_pool
        self.num_heads = num_heads  # known lazily from the first q when not given
        self.max_batch = max_batch or req_to_token_pool.size
        self.workspace: DecodeWorkspace | None = None
        self.metadata = _Metadata()
        self.planner = (
            CascadePlanner(num_heads, kv_pool.head_num, kv_pool.device, self.max_batch)
            if cascade and num_heads
            else None
        )
        self.num_sms = (
            torch.cuda.get_device_properties(kv_pool.device).multi_processor_count if torch.cuda.is_available() else 132
        )

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_decode():
            bs = forward_batch.batch_size
            cascade = self.planner.eager(forward_batch.shared_prefix_groups, bs) if self.planner else None
            self.metadata = _Metadata(
                num_splits=num_splits_for(bs, self.kv_pool.head_num, self.num_sms), cascade=cascade
            )
        else:
            self.metadata = _Metadata(max_extend_len=max(forward_batch.extend_seq_lens_cpu, default=0))

    def graph_variants(self, batch_size: int) -> tuple:
        """Graphs of GRAPH_MIN_BATCH rows up to max_batch come twice: without cascade launches (a batch
        with no shared prefix then launches nothing for it) and with them ("cascade")."""
        return (None, "cascade") if self._graph_cascade(batch_size) else (None,)

    def init_graph_metadata(self, forward_batch: ForwardBatch, variant=None) -> None:
        """At capture (DECODE): fixed grids; for the "cascade" variant, cascade launches over the static
        buffers (larger graphs than max_batch serve only flattened extends: no cascade)."""
        bs = forward_batch.batch_size
        cascade = self.planner.static(bs) if variant == "cascade" and self.planner is not None else None
        self.metadata = _Metadata(num_splits=num_splits_for(bs, self.kv_pool.head_num, self.num_sms), cascade=cascade)

    def fill_graph_metadata(self, forward_batch: ForwardBatch, padded: int):
        """Before replaying a `padded`-row graph for this batch: its shared-prefix chunks into the static
        buffers and the "cascade" variant, or the plain variant when it has none."""
        if not self._graph_cascade(padded) or not forward_batch.shared_prefix_groups:
            return None
        assert self.planner is not None
        filled = self.planner.fill(forward_batch.shared_prefix_groups, forward_batch.batch_size, padded)
        return "cascade" if filled else None

    def _graph_cascade(self, rows: int) -> bool:
        """Whether the graph of `rows` rows captures cascade launches (the static buffers hold max_batch rows)."""
        return self.planner is not None and GRAPH_MIN_BATCH <= rows <= self.planner.max_batch

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        # q: [T, H, D]; k, v: [T, Hkv, D] -> [T, H, D]
        layer_id = layer.layer_id
        store_kv(
            self.kv_pool.get_key_buffer(layer_id),
            self.kv_pool.get_value_buffer(layer_id),
            forward_batch.out_cache_loc,
            _dense_rows(k),
            _dense_rows(v),
        )
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, layer, forward_batch)
        return self.forward_extend(q, layer, forward_batch)

    def forward_extend(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor:
        o = torch.empty_like(q)
        extend_attention(
            q,
            o,
            self.kv_pool.get_key_buffer(layer.layer_id),
            self.kv_pool.get_value_buffer(layer.layer_id),
            self._req_to_token(forward_batch),
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.extend_seq_lens,
            forward_batch.extend_start_loc,
            self.metadata.max_extend_len,
            layer.scaling,
        )
        return o

    def forward_decode(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor:
        o = torch.empty_like(q)
        k_buffer = self.kv_pool.get_key_buffer(layer.layer_id)
        v_buffer = self.kv_pool.get_value_buffer(layer.layer_id)
        table = self._req_to_token(forward_batch)
        workspace = self._workspace(q)
        cascade = self.metadata.cascade
        if cascade is not None:  # each chunk's shared prefix once, into the workspace's prefix columns
            shared_prefix_attention(
                q,
                k_buffer,
                v_buffer,
                table,
                forward_batch.req_pool_indices,
                cascade.chunk_prefix,
                cascade.chunk_members,
                workspace,
                layer.scaling,
            )
        decode_attention(
            q,
            o,
            k_buffer,
            v_buffer,
            table,
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            workspace,
            self.metadata.num_splits,
            layer.scaling,
            kv_start=None if cascade is None else cascade.kv_start,
        )
        return o

    def _req_to_token(self, forward_batch: ForwardBatch) -> torch.Tensor:
        table = forward_batch.req_to_token
        return self.req_to_token_pool.req_to_token if table is None else table

    def _workspace(self, q: torch.Tensor) -> DecodeWorkspace:
        """Allocated once at the largest batch, so graphs captured later keep reusing the same memory."""
        if self.workspace is None:
            heads = self.num_heads or q.shape[1]
            self.workspace = DecodeWorkspace(
                max(self.max_batch, q.shape[0]), heads, q.shape[2], q.device, cascade=self.planner is not None
            )
        assert q.shape[0] <= self.workspace.max_batch, f"decode batch {q.shape[0]} exceeds {self.workspace.max_batch}"
        return self.workspace


def _dense_rows(x: torch.Tensor) -> torch.Tensor:
    """x [T, Hkv, D] with each token's row dense (a strided slice of the fused qkv output is fine)."""
    return x if x.stride(2) == 1 and x.stride(1) == x.shape[2] else x.contiguous()
