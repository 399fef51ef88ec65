"""Lazy access to Triton (importing sgl_runtime.kernels never requires it: CPU installs lack it) and the kernels' jit options."""

from __future__ import annotations

import functools
import importlib.util


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether `triton` can be imported here (it is the `gpu` extra, not a hard dependency)."""
    return importlib.util.find_spec("triton") is not None


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def jit(**specialization):
    """`triton.jit(**specialization)` as a decorator. Index and metadata arguments of the kernels are
    listed in `do_not_specialize_on_alignment`: they arrive as slices of one staging buffer or of
    the slot allocator's free list, whose 16-byte alignment changes with the batch, and each new
    alignment would otherwise compile the kernel again (a second or so, mid-request). Tritons that
    lack the option get plain `triton.jit`."""
    import triton

    try:
        return triton.jit(**specialization)
    except TypeError:
        specialization.pop("do_not_specialize_on_alignment", None)
        return triton.jit(**specialization)
