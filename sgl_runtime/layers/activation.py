"""SiluAndMul: the gated activation of a merged gate_up projection."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, 2 * I] (gate then up) -> [T, I]
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
