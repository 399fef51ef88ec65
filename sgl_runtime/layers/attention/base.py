"""The interface every attention backend implements (torch reference, Triton)."""

from __future__ import annotations

import abc

import torch

from sgl_runtime.forward_batch import ForwardBatch


class AttentionBackend(abc.ABC):
    """Owns nothing but a reference to the KV pool; per-batch metadata comes in ForwardBatch."""

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:  # noqa: B027 - optional hook
        """Precompute per-batch metadata once, before the layers run (optional)."""

    def graph_variants(self, batch_size: int) -> tuple:
        """The graphs to capture for `batch_size` rows, one per variant key (default: one, None)."""
        return (None,)

    def init_graph_metadata(self, forward_batch: ForwardBatch, variant=None) -> None:
        """At CUDA-graph capture: the metadata for a DECODE batch of static buffers (default: as eager)."""
        self.init_forward_metadata(forward_batch)

    def fill_graph_metadata(self, forward_batch: ForwardBatch, padded: int):
        """Before a replay for `forward_batch`: refresh what the `padded`-row graph reads, and return
        the variant (of `graph_variants(padded)`) to replay."""
        return None

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        # q: [T, H, D]; k, v: [T, Hkv, D] -> [T, H, D]
        self.kv_pool.set_kv_buffer(layer.layer_id, forward_batch.out_cache_loc, k, v)
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, layer, forward_batch)
        return self.forward_extend(q, layer, forward_batch)

    @abc.abstractmethod
    def forward_extend(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor: ...

    @abc.abstractmethod
    def forward_decode(self, q: torch.Tensor, layer, forward_batch: ForwardBatch) -> torch.Tensor: ...
