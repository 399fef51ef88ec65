"""The Triton attention backend (CUDA): store K/V, extend attention and split-KV decode attention.

`init_forward_metadata` does all per-batch host work once (no per-layer host syncs); in DECODE mode
it touches no device memory, so a CUDA graph can capture the whole forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgl_runtime.forward_batch import ForwardBatch
from sgl_runtime.kernels.decode_attention import DecodeWorkspace, decode_attention, num_splits_for
from sgl_runtime.kernels.extend_attention import extend_attention
from sgl_runtime.kernels.store_kv import store_kv
from sgl_runtime.layers.attention.base import AttentionBackend


@dataclass
class _Metadata:
    max_extend_len: int = 0
    num_splits: int = 2


class TritonAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool, req_to_token_pool, num_heads: int | None = None, max_batch: int | None = None):
        self.kv_pool = kv_pool
        self.req_to_token_pool = req_to_token_pool
        self.num_heads = num_heads  # known lazily from the first q when not given
        self.max_batch = max_batch or req_to_token_pool.size
        self.workspace: DecodeWorkspace | None = None
        self.metadata = _Metadata()
        self.num_sms = (
            torch.cuda.get_device_properties(kv_pool.device).multi_processor_count if torch.cuda.is_available() else 132
        )

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_decode():
            self.metadata = _Metadata(
                num_splits=num_splits_for(forward_batch.batch_size, self.kv_pool.head_num, self.num_sms)
            )
        else:
            self.metadata = _Metadata(max_extend_len=max(forward_batch.extend_seq_lens_cpu, default=0))

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
        decode_attention(
            q,
            o,
            self.kv_pool.get_key_buffer(layer.layer_id),
            self.kv_pool.get_value_buffer(layer.layer_id),
            self._req_to_token(forward_batch),
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            self._workspace(q),
            self.metadata.num_splits,
            layer.scaling,
        )
        return o

    def _req_to_token(self, forward_batch: ForwardBatch) -> torch.Tensor:
        table = forward_batch.req_to_token
        return self.req_to_token_pool.req_to_token if table is None else table

    def _workspace(self, q: torch.Tensor) -> DecodeWorkspace:
        """Allocated once at the largest batch, so graphs captured later keep reusing the same memory."""
        if self.workspace is None:
            heads = self.num_heads or q.shape[1]
            self.workspace = DecodeWorkspace(max(self.max_batch, q.shape[0]), heads, q.shape[2], q.device)
        assert q.shape[0] <= self.workspace.max_batch, f"decode batch {q.shape[0]} exceeds {self.workspace.max_batch}"
        return self.workspace


def _dense_rows(x: torch.Tensor) -> torch.Tensor:
    """x [T, Hkv, D] with each token's row dense (a strided slice of the fused qkv output is fine)."""
    return x if x.stride(2) == 1 and x.stride(1) == x.shape[2] else x.contiguous()
