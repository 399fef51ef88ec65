"""Mixtral: Mistral's attention with a sparse MoE block on every layer (softmax over the experts, top k,
renormalized). Checkpoints name the block `block_sparse_moe` and the experts' projections w1 (gate),
w3 (up), w2 (down)."""

from __future__ import annotations

from typing import ClassVar, Iterable

import torch

from sgl_runtime.layers.moe import SparseMoeBlock
from sgl_runtime.models.llama import MistralForCausalLM
from sgl_runtime.models.moe_weights import ExpertWeightLoader


class MixtralForCausalLM(MistralForCausalLM):
    expert_projections: ClassVar[dict[str, str]] = {"w1": "gate", "w3": "up", "w2": "down"}

    def __init__(self, config):
        super().__init__(config)
        for layer in self.model.layers:
            layer.mlp = SparseMoeBlock(
                config.hidden_size,
                config.num_local_experts,
                config.num_experts_per_tok,
                config.intermediate_size,
                renormalize=True,
            )

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        experts = ExpertWeightLoader(self, self.expert_projections)
        renamed = ((name.replace(".block_sparse_moe.", ".mlp."), tensor) for name, tensor in weights)
        return super().load_weights(experts.others(renamed)) | experts.loaded()
