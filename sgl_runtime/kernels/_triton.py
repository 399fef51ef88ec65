"""Lazy access to Triton: importing sgl_runtime.kernels never requires it (CPU installs lack it)."""

from __future__ import annotations

import functools
import importlib.util


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether `triton` can be imported here (it is the `gpu` extra, not a hard dependency)."""
    return importlib.util.find_spec("triton") is not None


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
