"""Mixture of experts: top-k routing and the experts' gated MLPs, over stacked [E, ...] expert weights.

`select_experts` routes; `kernels/fused_moe.py` holds the experts' exact torch reference (the CPU
path) beside the Triton grouped-GEMM kernel that CUDA tensors take. `FusedMoE` holds every
expert's weights as two plain parameters, w13 [E, 2I, H] (gate rows then up rows) and w2 [E, H, I],
filled one checkpoint tensor at a time through `weight_loader`.

With tensor parallelism (a `tp` group of N ranks) every rank holds every expert, narrowed on the
intermediate dimension (SGLang's and vLLM's default): w13 [E, 2I/N, H] (its rows of gate and of up),
w2 [E, H, I/N] (the matching columns). Each rank's experts give a partial sum of the output and one
all-reduce adds them; the router stays replicated, so every rank routes every token alike.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from sgl_runtime.distributed.parallel_state import TPGroup
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
    """The experts of one MoE layer: routing weights in, the weighted sum of the chosen experts out.
    With `tp`, this rank's 1/N of every expert's intermediate dimension, and one all-reduce per call."""

    def __init__(
        self,
        num_experts: int,
        top_k: int,
        hidden_size: int,
        intermediate_size: int,
        renormalize: bool,
        tp: Optional[TPGroup] = None,
    ):
        super().__init__()
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={top_k} must be in [1, num_experts={num_experts}]")
        self.tp = tp if tp is not None and tp.size > 1 else None
        tp_size, tp_rank = (self.tp.size, self.tp.rank) if self.tp is not None else (1, 0)
        if intermediate_size % tp_size:
            raise ValueError(f"tp_size {tp_size} does not divide the experts' intermediate size {intermediate_size}")
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.hidden_size = hidden_size
        self.full_intermediate_size = intermediate_size
        self.intermediate_size = intermediate_size // tp_size  # this rank's part of every expert
        self.shard_start = tp_rank * self.intermediate_size  # where it starts in the checkpoint's rows
        local = self.intermediate_size
        self.w13_weight = nn.Parameter(torch.empty(num_experts, 2 * local, hidden_size), requires_grad=False)
        self.w2_weight = nn.Parameter(torch.empty(num_experts, hidden_size, local), requires_grad=False)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = select_experts(router_logits, self.top_k, self.renormalize)  # [T, k]
        if fusion.use_fused_kernels(x):
            out = fused_experts(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids)
        else:
            out = fused_experts_torch(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids)
        return out if self.tp is None else self.tp.all_reduce(out)  # [T, H], partial sums added over ranks

    @torch.no_grad()
    def weight_loader(self, source, expert_id: int, shard: str) -> str:
        """Copy this rank's part of one expert's gate, up ([I, H]) or down ([H, I]) matrix into place;
        `source` is a tensor or a safetensors slice (only that part is read). Returns the parameter name."""
        if not 0 <= expert_id < self.num_experts:
            raise ValueError(f"expert {expert_id} is out of range for {self.num_experts} experts")
        full, hidden = self.full_intermediate_size, self.hidden_size
        self._check_shape(
            f"expert {expert_id} {shard} weight", source, (hidden, full) if shard == "down" else (full, hidden)
        )
        rows = slice(self.shard_start, self.shard_start + self.intermediate_size)
        if shard == "down":
            self.w2_weight[expert_id].copy_(source[:, rows])  # [H, I/N]
            return "w2_weight"
        offset = 0 if shard == "gate" else self.intermediate_size
        self.w13_weight[expert_id].narrow(0, offset, self.intermediate_size).copy_(source[rows])  # [I/N, H]
        return "w13_weight"

    @torch.no_grad()
    def load_stacked(self, name: str, source, param: str) -> None:
        """Copy this rank's part of a whole stacked tensor (transformers 5's layout): gate_up [E, 2I, H]
        into w13_weight, or down [E, H, I] into w2_weight."""
        full, local, start = self.full_intermediate_size, self.intermediate_size, self.shard_start
        if param == "w2_weight":
            self._check_shape(f"checkpoint tensor {name!r}", source, (self.num_experts, self.hidden_size, full))
            self.w2_weight.copy_(source[:, :, start : start + local])  # [E, H, I/N]
            return
        self._check_shape(f"checkpoint tensor {name!r}", source, (self.num_experts, 2 * full, self.hidden_size))
        self.w13_weight[:, :local].copy_(source[:, start : start + local])  # gate rows [E, I/N, H]
        self.w13_weight[:, local:].copy_(source[:, full + start : full + start + local])  # up rows

    def expected_shards(self, param_name: str) -> set[tuple[int, str]]:
        """Every (expert, shard) a complete checkpoint writes into `param_name`."""
        shards = ("down",) if param_name == "w2_weight" else ("gate", "up")
        return {(e, s) for e in range(self.num_experts) for s in shards}

    @staticmethod
    def _check_shape(what: str, source, expected: tuple[int, ...]) -> None:
        shape = tuple(source.shape) if isinstance(source, torch.Tensor) else tuple(source.get_shape())
        if shape != expected:
            raise ValueError(f"{what} has shape {shape}, expected {expected}")


class SparseMoeBlock(nn.Module):
    """Router (a bias-free linear, named `gate` as in the checkpoints) plus the experts: [T, H] -> [T, H]."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, intermediate_size: int, renormalize: bool):
        super().__init__()
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = FusedMoE(num_experts, top_k, hidden_size, intermediate_size, renormalize)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.experts(x, self.gate(x))  # router logits [T, E]
