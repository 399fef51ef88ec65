"""Checkpoint loading for mixture-of-experts models: per-expert HF tensors go into the stacked [E, ...]
FusedMoE parameters (each rank's FusedMoE reads only its part of a tensor or safetensors slice); every
other tensor passes through to the dense model's loader unchanged."""

from __future__ import annotations

import re
from typing import Iterable, Iterator

import torch
from torch import nn

from sgl_runtime.layers.moe import FusedMoE

# `...experts.<id>.<projection>.weight` (one expert's matrix) and transformers 5's fused in-memory layout
_PER_EXPERT = re.compile(r"^(?P<module>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>\w+)\.weight$")
_FUSED = re.compile(r"^(?P<module>.+\.experts)\.(?P<param>gate_up_proj|down_proj)$")
_FUSED_PARAMS = {"gate_up_proj": "w13_weight", "down_proj": "w2_weight"}


class ExpertWeightLoader:
    """Routes a checkpoint's expert tensors into a model's FusedMoE modules and tracks completeness."""

    def __init__(self, model: nn.Module, projections: dict[str, str]):
        """projections: checkpoint projection name -> shard, e.g. {"gate_proj": "gate", "w2": "down"}."""
        self.experts = {name: m for name, m in model.named_modules() if isinstance(m, FusedMoE)}
        self.projections = projections
        self.seen: dict[str, set[tuple[int, str]]] = {}

    def others(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Load the expert tensors of `weights` and yield the rest."""
        for name, tensor in weights:
            if not self._load(name, tensor):
                yield name, tensor

    def loaded(self) -> set[str]:
        """Names of the expert parameters every expert's shards were written into."""
        done = set()
        for module_name, module in self.experts.items():
            for param in ("w13_weight", "w2_weight"):
                full = f"{module_name}.{param}"
                if self.seen.get(full, set()) >= module.expected_shards(param):
                    done.add(full)
        return done

    @torch.no_grad()
    def _load(self, name: str, tensor: torch.Tensor) -> bool:
        per_expert = _PER_EXPERT.match(name)
        if per_expert and per_expert["module"] in self.experts and per_expert["proj"] in self.projections:
            module = self.experts[per_expert["module"]]
            expert, shard = int(per_expert["expert"]), self.projections[per_expert["proj"]]
            param = module.weight_loader(tensor, expert, shard)
            self.seen.setdefault(f"{per_expert['module']}.{param}", set()).add((expert, shard))
            return True
        fused = _FUSED.match(name)
        if fused and fused["module"] in self.experts:
            module, param = self.experts[fused["module"]], _FUSED_PARAMS[fused["param"]]
            module.load_stacked(name, tensor, param)
            self.seen.setdefault(f"{fused['module']}.{param}", set()).update(module.expected_shards(param))
            return True
        return False
