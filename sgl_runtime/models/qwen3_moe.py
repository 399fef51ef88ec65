"""Qwen3-MoE (e.g. Qwen3-30B-A3B): Qwen3's attention, with sparse MoE blocks in place of the dense MLP
on the layers the config marks sparse (softmax top-k routing, renormalized when norm_topk_prob)."""

from __future__ import annotations

from typing import ClassVar, Iterable

import torch

from sgl_runtime.layers.moe import SparseMoeBlock
from sgl_runtime.models.moe_weights import ExpertWeightLoader
from sgl_runtime.models.qwen3 import Qwen3ForCausalLM


def is_sparse_layer(config, layer_id: int) -> bool:
    """transformers' rule: not in mlp_only_layers, and every decoder_sparse_step-th layer."""
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)
    return (
        layer_id not in (getattr(config, "mlp_only_layers", None) or [])
        and config.num_experts > 0
        and (layer_id + 1) % step == 0
    )


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    expert_projections: ClassVar[dict[str, str]] = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}

    def __init__(self, config):
        super().__init__(config)
        for layer_id, layer in enumerate(self.model.layers):
            if is_sparse_layer(config, layer_id):
                layer.mlp = SparseMoeBlock(
                    config.hidden_size,
                    config.num_experts,
                    config.num_experts_per_tok,
                    config.moe_intermediate_size,
                    renormalize=bool(config.norm_topk_prob),
                )

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        experts = ExpertWeightLoader(self, self.expert_projections)
        return super().load_weights(experts.others(weights)) | experts.loaded()
