"""The one switch between the fused Triton kernels and the exact torch layer code.

Layers ask `use_fused_kernels(x)`: true for CUDA tensors when Triton is importable, unless the
environment sets SGL_DISABLE_FUSED_KERNELS=1 (a one-flag bypass should a kernel misbehave on a GPU).
CPU tensors always take the torch path, so CPU logits stay bit-for-bit those of the reference code.
The answer depends only on the device, never on tensor values, so CUDA-graph capture is unaffected.
"""

from __future__ import annotations

import functools
import os

import torch

from sgl_runtime.kernels._triton import triton_available

DISABLE_ENV = "SGL_DISABLE_FUSED_KERNELS"


@functools.lru_cache(maxsize=None)
def fused_kernels_allowed() -> bool:
    """Triton is importable and the environment did not disable fusion (read once per process)."""
    return triton_available() and os.environ.get(DISABLE_ENV, "0").strip().lower() not in ("1", "true", "yes")


def use_fused_kernels(x: torch.Tensor) -> bool:
    """Whether the layers should run their fused kernels on `x` (a CUDA tensor, fusion allowed)."""
    return x.is_cuda and fused_kernels_allowed()
