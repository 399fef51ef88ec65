"""Child-process entry of tensor-parallel ranks 1..N-1: load this rank's shard and run every forward
rank 0's scheduler broadcasts. Also starts a node's worker ranks and fills in the rendezvous address.

A worker holds nothing to clean up and may sit inside a collective (where no Python signal handler
runs), so SIGTERM, and its parent's death, end it at once."""

from __future__ import annotations

import logging
import signal
from multiprocessing.connection import Connection

from sgl_runtime.distributed.layout import check_tp_fits, free_local_init_addr, ranks_of_node
from sgl_runtime.process.child_processes import ChildProcesses
from sgl_runtime.process.ipc import ChildLifetime, report_fatal, setup_child_process
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def with_rendezvous(server_args: ServerArgs) -> ServerArgs:
    """A single-node tensor-parallel group rendezvous on a free loopback port unless told otherwise."""
    if server_args.tp_size > 1 and server_args.dist_init_addr is None:
        return server_args.replace(dist_init_addr=free_local_init_addr())
    return server_args


def check_tp_config(server_args: ServerArgs) -> None:
    """ValueError in one line, before any rank starts, when the checkpoint does not split over tp_size ranks."""
    from sgl_runtime.model_config import ModelConfig

    if server_args.tp_size == 1:
        return
    config = ModelConfig.from_path(
        server_args.model_path, server_args.dtype, server_args.context_length, server_args.resolved_device
    )
    check_tp_fits(
        server_args.tp_size,
        server_args.nnodes,
        config.num_attention_heads,
        config.num_kv_heads,
        int(getattr(config.hf_config, "intermediate_size", 0) or 0),
        server_args.resolved_device,
        moe_intermediate_size=int(getattr(config.hf_config, "moe_intermediate_size", 0) or 0),
    )


def worker_process_name(rank: int) -> str:
    return f"tp-rank-{rank}"


def start_tp_workers(children: ChildProcesses, server_args: ServerArgs) -> list[int]:
    """Start this node's worker ranks (every rank it hosts but rank 0, which the scheduler is)."""
    ranks = [r for r in ranks_of_node(server_args.tp_size, server_args.nnodes, server_args.node_rank) if r != 0]
    for rank in ranks:
        children.start(worker_process_name(rank), run_tp_worker_process, server_args, rank)
    return ranks


def run_tp_worker_process(server_args: ServerArgs, tp_rank: int, conn: Connection) -> None:
    """Process target: join the group, load the shard, report readiness, serve forwards until rank 0 stops."""
    from sgl_runtime.model_config import ModelConfig
    from sgl_runtime.model_executor.model_runner import ModelRunner

    setup_child_process(worker_process_name(tp_rank), server_args.log_level)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        config = ModelConfig.from_path(
            server_args.model_path, server_args.dtype, server_args.context_length, server_args.resolved_device
        )
        runner = ModelRunner(server_args, config, tp_rank)
    except Exception:
        report_fatal(conn, f"tensor-parallel rank {tp_rank} failed to start")
        ChildLifetime.exit(1)
    conn.send({"status": "ready"})
    try:
        runner.serve_as_worker()
    except Exception:
        report_fatal(conn, f"tensor-parallel rank {tp_rank} stopped")
        ChildLifetime.exit(1)
    logger.info("rank 0 stopped the group; rank %d exits", tp_rank)
    ChildLifetime.exit(0)
