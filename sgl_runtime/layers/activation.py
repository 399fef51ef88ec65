"""SiluAndMul: the gated activation of a merged gate_up projection (one Triton kernel on CUDA)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from sgl_runtime.kernels import fusion
from sgl_runtime.kernels.silu_and_mul import silu_and_mul


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, 2 * I] (gate then up) -> [T, I]
        if fusion.use_fused_kernels(x) and x.dim() == 2 and x.stride(1) == 1:
            return silu_and_mul(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
