"""The attention layer models call: stores the new K/V into the pool and attends through the backend."""

from __future__ import annotations

import torch
from torch import nn

from sgl_runtime.forward_batch import ForwardBatch


class RadixAttention(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, scaling: float, num_kv_heads: int, layer_id: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scaling = scaling
        self.num_kv_heads = num_kv_heads
        self.layer_id = layer_id

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, forward_batch: ForwardBatch) -> torch.Tensor:
        # q: [T, H*D], k/v: [T, Hkv*D] -> out: [T, H*D]
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        out = forward_batch.attn_backend.forward(q, k, v, self, forward_batch)
        return out.reshape(-1, self.num_heads * self.head_dim)
