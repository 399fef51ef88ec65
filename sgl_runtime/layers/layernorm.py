"""RMSNorm, computed in float32 and cast back, as Llama/Qwen do; optionally fused with the residual add.

On CUDA (unless SGL_DISABLE_FUSED_KERNELS=1) each call is one Triton kernel; elsewhere it is the
exact torch code, whose results the CPU tests compare with transformers.
"""

from __future__ import annotations

import torch
from torch import nn

from sgl_runtime.kernels import fusion
from sgl_runtime.kernels.rmsnorm import fused_add_rmsnorm, rmsnorm


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """norm(x) [..., N]; with `residual`: (norm(x + residual), x + residual), the sum in x's dtype."""
        if residual is None:
            return self._norm(x)
        if fusion.use_fused_kernels(x) and x.dim() == 2:
            return fused_add_rmsnorm(x, residual, self.weight, self.variance_epsilon)
        residual = x + residual
        return self._norm(residual), residual

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if fusion.use_fused_kernels(x) and x.dim() in (2, 3) and x.stride(-1) == 1:
            return rmsnorm(x, self.weight, self.variance_epsilon)
        input_dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(input_dtype)
