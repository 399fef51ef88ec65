"""`python -m sgl_runtime.launch_server`: starts the scheduler and detokenizer processes, then
serves HTTP with the TokenizerManager in this process; any child's death stops the server."""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import sys
import time
from typing import Optional

from sgl_runtime.preflight import check_server_args
from sgl_runtime.process.child_processes import ChildProcesses, ChildProcessFailed
from sgl_runtime.process.ipc import IpcAddresses, configure_logging, remove_stale_ipc_dirs
from sgl_runtime.scheduler.tp_worker_process import check_tp_config, start_tp_workers, with_rendezvous
from sgl_runtime.server.request_tokenizer import ModelInfo
from sgl_runtime.server_args import ServerArgs, parse_args

logger = logging.getLogger("sgl_runtime.launch_server")

GRACEFUL_SHUTDOWN_S = 5


def main(argv: Optional[list[str]] = None) -> None:
    try:
        server_args = parse_args(argv)
    except ValueError as exc:  # ServerArgs' own validation (argparse handles types and choices)
        sys.exit(f"launch_server: error: {exc}")
    sys.exit(launch_server(server_args))


def launch_server(server_args: ServerArgs) -> int:
    """Run the server until it is stopped; return the process exit code (0 clean, 1 failure)."""
    configure_logging(server_args.log_level)
    signal.signal(signal.SIGTERM, _exit_on_signal)  # clean up children if stopped while starting
    for folder in remove_stale_ipc_dirs():
        logger.info("removed the IPC folder %s of a server that is gone", folder)
    try:
        check_server_args(server_args)
        if server_args.node_rank == 0:
            check_port_free(server_args.host, server_args.port)
        server_args = with_rendezvous(resolve_model(server_args))
        check_tp_config(server_args)
        model_info = ModelInfo.read(server_args)
    except (OSError, ValueError) as exc:
        logger.error("cannot start the server: %s", exc)
        return 1
    _log_compat_flags(server_args)
    addresses = IpcAddresses.make()
    children = ChildProcesses()
    try:
        if server_args.node_rank > 0:
            return _serve_ranks(server_args, children)
        return _serve(server_args, model_info, addresses, children)
    except ChildProcessFailed as exc:
        logger.error("cannot start the server: %s", exc)
        return 1
    except (KeyboardInterrupt, StopSignal):
        logger.info("stopped by signal")
        return 0
    except SystemExit as exc:  # uvicorn exits this way when it cannot bind the port
        return exc.code if isinstance(exc.code, int) and exc.code else 1
    finally:
        children.stop()
        shutil.rmtree(addresses.folder, ignore_errors=True)


def check_port_free(host: str, port: int) -> None:
    """Fail before loading the model when the HTTP port is taken (OSError naming it)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise OSError(f"cannot bind {host}:{port}: {exc.strerror}") from exc


def resolve_model(server_args: ServerArgs) -> ServerArgs:
    """--model-path as a local model directory (the demo model when none is given), resolved once here so
    that the child processes read the same directory; the API keeps reporting the name the user gave."""
    from sgl_runtime.model_executor.model_runner import resolve_model_path
    from sgl_runtime.model_loader.model_source import served_name

    return server_args.replace(
        model_path=resolve_model_path(server_args),
        served_model_name=server_args.served_model_name or served_name(server_args.model_path),
    )


def _serve(server_args: ServerArgs, model_info, addresses: IpcAddresses, children: ChildProcesses) -> int:
    import uvicorn

    from sgl_runtime.detokenizer.detokenizer_manager import run_detokenizer_process
    from sgl_runtime.scheduler.scheduler_process import run_scheduler_process
    from sgl_runtime.server.graceful import DrainingServer
    from sgl_runtime.server.http_server import build_app
    from sgl_runtime.server.metrics import ServerMetrics
    from sgl_runtime.server.tokenizer_manager import TokenizerManager
    from sgl_runtime.server.transport import ZmqTransport

    children.start("scheduler", run_scheduler_process, server_args, addresses)
    start_tp_workers(children, server_args)
    children.start("detokenizer", run_detokenizer_process, server_args, addresses)
    metrics = ServerMetrics()
    tm = TokenizerManager(server_args, model_info, ZmqTransport(addresses), metrics)
    infos = children.wait_ready()
    stats = infos["scheduler"].get("stats") or {}
    logger.info("scheduler ready: %s", stats)
    tm.admission.capacity = int(stats.get("max_running_requests") or 0)
    process_ids = {name: process.pid for name, process in children.processes.items()}
    config = uvicorn.Config(
        build_app(tm, metrics, process_ids),
        host=server_args.host,
        port=server_args.port,
        log_level=server_args.log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = DrainingServer(config, tm, server_args.graceful_shutdown_timeout)

    def on_child_failure(message: str) -> None:
        logger.error("shutting down: %s", message)
        server.failure = message
        server.should_exit = True

    children.watch(on_child_failure)
    server.run()
    if server.failure or not server.started:
        return 1
    return 0


def _serve_ranks(server_args: ServerArgs, children: ChildProcesses) -> int:
    """A node other than node 0: run its tensor-parallel ranks (no HTTP) until rank 0 stops them (0) or
    one of them fails (1)."""
    start_tp_workers(children, server_args)
    children.wait_ready()
    logger.info(
        "node %d: tensor-parallel ranks ready (process ids %s)",
        server_args.node_rank,
        {name: process.pid for name, process in children.processes.items()},
    )
    ended: list[str] = []
    children.watch(ended.append)
    while not ended:
        time.sleep(0.5)
    for process in children.processes.values():
        process.join(5.0)
    if all(process.exitcode == 0 for process in children.processes.values()):
        logger.info("node %d: rank 0 stopped the group", server_args.node_rank)
        return 0
    logger.error("node %d shutting down: %s", server_args.node_rank, ended[0])
    return 1


def _log_compat_flags(server_args: ServerArgs) -> None:
    """SGLang flags accepted as no-ops say so once."""
    if server_args.enable_metrics:
        logger.info("--enable-metrics: metrics are always on (GET /metrics)")
    if server_args.trust_remote_code:
        logger.info("--trust-remote-code: accepted; no remote code is run (the architectures are built in)")


class StopSignal(BaseException):
    """SIGTERM arrived (raised from the handler so that cleanup runs)."""


def _exit_on_signal(signum: int, _frame) -> None:
    raise StopSignal(signum)


if __name__ == "__main__":
    main()
