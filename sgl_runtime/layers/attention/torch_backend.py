"""The reference attention backend: per request, gather K/V through req_to_token and run SDPA (serves the CPU)."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from sgl_runtime.forward_batch import ForwardBatch
from sgl_runtime.kernels.cascade_attention import cascade_decode_attention_torch
from sgl_runtime.layers.attention.base import AttentionBackend


class TorchAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool, req_to_token_pool, cascade: bool = False):
        """`cascade`: decode batches with shared-prefix groups read each group's prefix once."""
        self.kv_pool = kv_pool
        self.req_to_token_pool = req_to_token_pool
        self.cascade = cascade

    def forward_extend(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor:
        return self._attend(q, layer, forward_batch)

    def forward_decode(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor:
        if self.cascade and forward_batch.shared_prefix_groups:
            return cascade_decode_attention_torch(
                q,
                self.kv_pool.get_key_buffer(layer.layer_id),
                self.kv_pool.get_value_buffer(layer.layer_id),
                self._req_to_token(forward_batch),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens_cpu,
                forward_batch.shared_prefix_groups,
                layer.scaling,
            )
        # Decode is an extend of one token per request: no mask needed, the token sees its whole sequence.
        return self._attend(q, layer, forward_batch)

    def _req_to_token(self, forward_batch: ForwardBatch) -> torch.Tensor:
        table = forward_batch.req_to_token
        return self.req_to_token_pool.req_to_token if table is None else table

    def _attend(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor:
        # q: [T, H, D] -> out: [T, H, D]
        k_buffer = self.kv_pool.get_key_buffer(layer.layer_id)
        v_buffer = self.kv_pool.get_value_buffer(layer.layer_id)
        req_to_token = self._req_to_token(forward_batch)
        out = torch.empty_like(q)
        start = 0
        for i, (seq_len, extend_len) in enumerate(zip(forward_batch.seq_lens_cpu, forward_batch.extend_seq_lens_cpu)):
            slots = req_to_token[forward_batch.req_pool_indices[i], :seq_len].long()  # [S]
            k = k_buffer[slots].transpose(0, 1)  # [Hkv, S, D]
            v = v_buffer[slots].transpose(0, 1)  # [Hkv, S, D]
            q_i = q[start : start + extend_len].transpose(0, 1)  # [H, E, D]
            mask = _causal_mask(seq_len - extend_len, extend_len, seq_len, q.device)
            o = F.scaled_dot_product_attention(
                q_i.unsqueeze(0),
                k.unsqueeze(0),
                v.unsqueeze(0),
                attn_mask=mask,
                scale=layer.scaling,
                enable_gqa=layer.num_heads != layer.num_kv_heads,
            )  # [1, H, E, D]
            out[start : start + extend_len] = o[0].transpose(0, 1).to(q.dtype)
            start += extend_len
        return out


def _causal_mask(prefix_len: int, extend_len: int, seq_len: int, device) -> torch.Tensor | None:
    """[E, S] bool: new token j (absolute position prefix_len + j) sees positions <= prefix_len + j."""
    if extend_len == 1:
        return None
    rows = torch.arange(extend_len, device=device)[:, None] + prefix_len
    return torch.arange(seq_len, device=device)[None, :] <= rows
