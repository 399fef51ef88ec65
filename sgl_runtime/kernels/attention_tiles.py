"""What the attention kernels (extend, split-KV decode, cascade prefix) share: the host-side checks of
their KV-pool operands and the online-softmax tile steps, as Triton device functions each kernel inlines.

Importing this module needs no Triton: the device functions (`start_state`, `attend_block`,
`partial_result`, `attend_range`, written in attention_tiles_triton.py) are imported on first access, as attributes
of this module, so a kernel calls them as `tiles.attend_block(...)` both compiled and under
TRITON_INTERPRET (whose rewrite of a kernel sees module globals, not a closure's variables).
"""

from __future__ import annotations

import importlib

import torch

LOG2E = 1.4426950408889634  # the kernels work in log2 units: exp2(x * LOG2E) == exp(x)


def check_kv_operands(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    o: torch.Tensor | None = None,
) -> None:
    """Asserts the layout every attention launcher needs: q (and o) [*, H, D] with a contiguous head dim,
    H a multiple of the KV heads, D a power of two, contiguous [slots, Hkv, D] K/V pools, and a
    req_to_token table whose rows are contiguous."""
    assert q.dim() == 3 and q.stride(2) == 1, ("head dim must be contiguous", q.shape)
    assert o is None or (o.shape == q.shape and o.stride(2) == 1), (q.shape, None if o is None else o.shape)
    heads, dim, kv_heads = q.shape[1], q.shape[2], k_buffer.shape[1]
    assert heads % kv_heads == 0, f"{heads} query heads are not a multiple of {kv_heads} KV heads"
    assert dim & (dim - 1) == 0, f"head dim {dim} must be a power of two"
    assert k_buffer.shape == v_buffer.shape and k_buffer.shape[2] == dim, (k_buffer.shape, q.shape)
    assert k_buffer.is_contiguous() and v_buffer.is_contiguous(), "KV buffers must be contiguous"
    assert req_to_token.dim() == 2 and req_to_token.stride(1) == 1, req_to_token.shape


DEVICE_FUNCTIONS = ("start_state", "attend_block", "partial_result", "attend_range")


def __getattr__(name: str):
    if name in DEVICE_FUNCTIONS:
        return getattr(importlib.import_module("sgl_runtime.kernels.attention_tiles_triton"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
