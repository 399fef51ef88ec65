"""The process groups of one tensor-parallel model (NCCL on CUDA, gloo on the CPU) and the few collectives
the sharded layers and the batch broadcast use. Nothing here is global: a TPGroup is passed to whoever
needs it (the parallel layers, the model runner)."""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

# Layer collectives (NCCL on CUDA) give up after this long; a dead rank is normally noticed much sooner,
# by the launcher watching its process.
DEVICE_TIMEOUT = datetime.timedelta(minutes=10)
# The host group carries the batch headers: a worker waits on it for as long as the server is idle.
HOST_TIMEOUT = datetime.timedelta(days=30)

# all_gather_single is all_gather_into_tensor's new name (torch 2.13 deprecates the old one).
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class TensorParallelError(RuntimeError):
    """A collective between the ranks failed: a rank died or stopped answering. Fatal for the model."""


@dataclass
class TPGroup:
    """This process's place in the tensor-parallel group: its rank, the world size, and two groups:
    `device_group` for the layers' collectives (NCCL on CUDA, gloo on CPU) and `host_group` (gloo) for
    Python objects (batch headers)."""

    rank: int
    size: int
    device: str
    host_group: Any = None

    @property
    def is_driver(self) -> bool:
        """Rank 0 runs the scheduler and tells the other ranks what to run."""
        return self.rank == 0

    # ---------------------------------------------------------------- layer collectives
    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place; returns the tensor."""
        dist.all_reduce(tensor)
        return tensor

    def all_gather_last(self, tensor: torch.Tensor) -> torch.Tensor:
        """[..., N] per rank -> [..., size * N], rank-major along the last dimension."""
        rows, columns = tensor.shape[0], tensor.shape[-1]
        gathered = torch.empty((self.size * rows, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
        _all_gather_single(gathered, tensor.contiguous())  # [size * rows, ..., N], rank-major
        return gathered.view(self.size, *tensor.shape).movedim(0, -2).reshape(*tensor.shape[:-1], self.size * columns)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0's tensor into every rank's (same shape and dtype), in place."""
        dist.broadcast(tensor, src=0)
        return tensor

    # ---------------------------------------------------------------- host collectives
    def broadcast_object(self, obj: Optional[object] = None) -> object:
        """Rank 0's picklable object, on every rank (over the gloo host group)."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.host_group)
        return box[0]

    def min_int(self, value: int) -> int:
        """The smallest of every rank's value (each rank sizes its own memory; all must agree)."""
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.host_group)
        return int(t.item())

    def destroy(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def init_tp_group(rank: int, size: int, init_addr: str, device: str) -> TPGroup:
    """Join the group: rank 0's TCP store at `init_addr` (host:port) rendezvous the `size` ranks. On CUDA
    the process must already have picked its GPU (torch.cuda.set_device)."""
    if dist.is_initialized():
        raise RuntimeError("this process already belongs to a tensor-parallel group (one model per process)")
    backend = "gloo" if device == "cpu" else "nccl"
    options = {}
    if backend == "nccl":
        options["device_id"] = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(
        backend, init_method=f"tcp://{init_addr}", world_size=size, rank=rank, timeout=DEVICE_TIMEOUT, **options
    )
    # Headers get their own gloo group (on the CPU too: its long timeout is for idle waits, not layer collectives).
    host_group = dist.new_group(backend="gloo", timeout=HOST_TIMEOUT)
    logger.info("tensor-parallel rank %d of %d joined via %s (%s)", rank, size, init_addr, backend)
    return TPGroup(rank=rank, size=size, device=device, host_group=host_group)
