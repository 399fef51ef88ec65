"""Host values to device tensors without a stream sync.

`torch.tensor(values, device="cuda")` copies from pageable memory, which waits for the GPU to
finish everything queued before it. Staging in pinned memory and copying non-blocking keeps the
copy in stream order instead, so the host can run ahead of the GPU (overlap scheduling relies on
it). The caching host allocator keeps a pinned block until its copy is done.
"""

from __future__ import annotations

from typing import Sequence, Union

import torch


def to_device(
    values: Union[Sequence, torch.Tensor], dtype: torch.dtype, device: Union[str, torch.device]
) -> torch.Tensor:
    """`values` (a list, or a CPU tensor) as a tensor of `dtype` on `device`."""
    device = torch.device(device)
    pin = device.type == "cuda"
    if isinstance(values, torch.Tensor):
        host = values.to(dtype).pin_memory() if pin else values.to(dtype)
    else:
        host = torch.tensor(values, dtype=dtype, pin_memory=pin)
    return host.to(device, non_blocking=True)
