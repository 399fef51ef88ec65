"""Mixture of experts: top-k routing and the experts' gated MLPs, over stacked [E, ...] expert weights.

`select_experts` routes; `kernels/fused_moe.py` holds the experts' exact torch reference (the CPU
path) beside the Triton grouped-GEMM kernel that CUDA tensors take. `FusedMoE` holds every
expert's weights as two plain parameters, w13 [E, 2I, H] (gate rows then up rows) and w2 [E, H, I],
filled one checkpoint tensor at a time through `weight_loader`, so a tensor-parallel or
expert-parallel version can later narrow either dimension in the loader alone.
"""

from __future__ import annotations

import torch
from torch import nn

from sgl_runtime.kernels import fusion
from sgl_runtime.kernels.fused_moe import fused_experts, fused_experts_torch

EXPERT_SHARDS = ("gate", "up", "down")


def select_experts(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over experts, keep the top k, optionally renormalize them to sum to one.
    router_logits [T, E] -> (weights [T, k] float32, expert ids [T, k] int64)."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)  # [T, E]
    weights, ids = torch.topk(probs, top_k, dim=-1)  # [T, k] each
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class FusedMoE(nn.Module):
    """The experts of one MoE layer: routing weights in, the weighted sum of the chosen experts out."""

    def __init__(self, num_experts: int, top_k: int, hidden_size: int, intermediate_size: int, renormalize: bool):
        super().__init__()
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={top_k} must be in [1, num_experts={num_experts}]")
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.intermediate_size = intermediate_size
        self.w13_weight = nn.Parameter(
            torch.empty(num_experts, 2 * intermediate_size, hidden_size), requires_grad=False
        )
        self.w2_weight = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size), requires_grad=False)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = select_experts(router_logits, self.top_k, self.renormalize)  # [T, k]
        if fusion.use_fused_kernels(x):
            return fused_experts(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids)
        return fused_experts_torch(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids)

    @torch.no_grad()
    def weight_loader(self, tensor: torch.Tensor, expert_id: int, shard: str) -> str:
        """Copy one expert's gate, up ([I, H]) or down ([H, I]) matrix into place; returns the parameter name."""
        if not 0 <= expert_id < self.num_experts:
            raise ValueError(f"expert {expert_id} is out of range for {self.num_experts} experts")
        if shard == "down":
            target, name = self.w2_weight[expert_id], "w2_weight"
        else:
            offset = 0 if shard == "gate" else self.intermediate_size
            target, name = self.w13_weight[expert_id].narrow(0, offset, self.intermediate_size), "w13_weight"
        if tuple(target.shape) != tuple(tensor.shape):
            raise ValueError(
                f"expert {expert_id} {shard} weight has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
            )
        target.copy_(tensor)
        return name

    def expected_shards(self, param_name: str) -> set[tuple[int, str]]:
        """Every (expert, shard) a complete checkpoint writes into `param_name`."""
        shards = ("down",) if param_name == "w2_weight" else ("gate", "up")
        return {(e, s) for e in range(self.num_experts) for s in shards}


class SparseMoeBlock(nn.Module):
    """Router (a bias-free linear, named `gate` as in the checkpoints) plus the experts: [T, H] -> [T, H]."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, intermediate_size: int, renormalize: bool):
        super().__init__()
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = FusedMoE(num_experts, top_k, hidden_size, intermediate_size, renormalize)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.experts(x, self.gate(x))  # router logits [T, E]
