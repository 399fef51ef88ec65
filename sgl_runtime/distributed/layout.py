"""Where the ranks of one tensor-parallel model run: which ranks each node hosts, which GPU a rank uses,
and the start-up checks that fail in one line before any process is spawned."""

from __future__ import annotations

import socket


def ranks_of_node(tp_size: int, nnodes: int, node_rank: int) -> range:
    """The global ranks node `node_rank` hosts: tp_size // nnodes consecutive ones."""
    per_node = tp_size // nnodes
    return range(node_rank * per_node, (node_rank + 1) * per_node)


def local_device_index(rank: int, tp_size: int, nnodes: int) -> int:
    """The GPU (index among the visible ones) that global rank `rank` uses on its node."""
    return rank % (tp_size // nnodes)


def check_tp_fits(
    tp_size: int,
    nnodes: int,
    num_heads: int,
    num_kv_heads: int,
    intermediate_size: int,
    device: str,
    moe_intermediate_size: int = 0,
) -> None:
    """ValueError in one line when the model's heads, MLP or experts (`moe_intermediate_size`, 0 for
    none) do not split over tp_size ranks, or a node has fewer visible GPUs than ranks."""
    if tp_size == 1:
        return
    if num_heads % tp_size:
        raise ValueError(f"--tp-size {tp_size} does not divide the model's {num_heads} attention heads")
    if intermediate_size % tp_size:
        raise ValueError(f"--tp-size {tp_size} does not divide the model's intermediate size {intermediate_size}")
    if moe_intermediate_size % tp_size:
        raise ValueError(f"--tp-size {tp_size} does not divide the experts' intermediate size {moe_intermediate_size}")
    if num_kv_heads % tp_size and tp_size % num_kv_heads:
        raise ValueError(f"--tp-size {tp_size} and the model's {num_kv_heads} KV heads: one must divide the other")
    if device != "cpu":
        import torch

        visible, per_node = torch.cuda.device_count(), tp_size // nnodes
        if per_node > visible:
            raise ValueError(f"--tp-size {tp_size} needs {per_node} GPUs on this node, {visible} visible")


def free_local_init_addr() -> str:
    """A loopback host:port for a single-node group's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"
