"""Plumbing shared by the server's processes: zmq addresses and sockets, child-process setup."""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import zmq

IPC_DIR_PREFIX = "sgl_runtime_ipc_"
OWNER_FILE = "owner.pid"
LOG_FORMAT = "[%(asctime)s %(processName)s] %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class IpcAddresses:
    """The three one-way zmq channels; the receiving side of each binds."""

    tokenizer_to_scheduler: str
    scheduler_to_detokenizer: str
    detokenizer_to_tokenizer: str

    @staticmethod
    def make() -> "IpcAddresses":
        """Fresh socket paths in a new folder that records its owner's pid (see remove_stale_ipc_dirs)."""
        folder = tempfile.mkdtemp(prefix=IPC_DIR_PREFIX)
        Path(folder, OWNER_FILE).write_text(str(os.getpid()))
        return IpcAddresses(*(f"ipc://{folder}/{name}" for name in ("scheduler", "detokenizer", "tokenizer")))

    @property
    def folder(self) -> str:
        return os.path.dirname(self.paths()[0])

    def paths(self) -> list[str]:
        return [
            a[len("ipc://") :]
            for a in (self.tokenizer_to_scheduler, self.scheduler_to_detokenizer, self.detokenizer_to_tokenizer)
        ]


def remove_stale_ipc_dirs(root: Optional[str] = None) -> list[str]:
    """Remove the IPC folders of servers that are gone (killed with SIGKILL, so their own cleanup
    never ran); a folder whose owner is alive, or that has no owner file yet, is left alone."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(IPC_DIR_PREFIX + "*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not _pid_alive(owner):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_socket(context: zmq.Context, kind: int, address: str, bind: bool) -> zmq.Socket:
    """A PUSH or PULL socket; no send high-water mark so a burst of requests never blocks or drops."""
    socket = context.socket(kind)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.LINGER, 0)
    (socket.bind if bind else socket.connect)(address)
    return socket


def configure_logging(log_level: str) -> None:
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT, force=True)


class ChildLifetime:
    """Whether a child process should keep running: until SIGTERM or its parent's death."""

    def __init__(self) -> None:
        self.parent_pid = os.getppid()
        self.stop_requested = False

    def keep_running(self) -> bool:
        return not self.stop_requested and os.getppid() == self.parent_pid

    def request_stop(self, *_: object) -> None:
        self.stop_requested = True

    @staticmethod
    def exit(code: int) -> None:
        """Leave now: flush the logs and skip the interpreter's slow teardown (torch, threads)."""
        logging.shutdown()
        os._exit(code)


def setup_child_process(name: str, log_level: str) -> ChildLifetime:
    """Name the process, apply the log level, die with the parent; SIGTERM asks the loop to stop.

    SIGINT is ignored: a Ctrl-C reaches the whole process group, and the parent then stops
    its children in order with SIGTERM.
    """
    import multiprocessing

    multiprocessing.current_process().name = name
    configure_logging(log_level)
    lifetime = ChildLifetime()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lifetime.request_stop)
    die_with_parent()
    tune_gc()
    return lifetime


GC_THRESHOLDS = (50_000, 20, 10)  # gc.set_threshold: a young collection per 50,000 net allocations


def tune_gc() -> None:
    """Collect young cycles every 50,000 net allocations rather than Python's 700. A process that
    holds compiled constraints (automata, lexer rows, parser tables: about a million small
    containers) otherwise runs a full collection every few compiles or masks, each scanning all of
    them; on 30 schemas of the corpus, compiled and walked in one process, full collections took
    35 s of a 170 s run by default and 5 s with this setting (docs/benchmarks.md). Applied in the server's children and compile workers, not in a caller's
    process (the offline Engine)."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)


def die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


def report_fatal(conn, what: str) -> None:
    """Log the exception being handled (its traceback, once, here) and tell the parent in one line
    (over its readiness pipe) why this child stops."""
    exc = sys.exc_info()[1]
    logging.getLogger(__name__).exception(what)
    message = f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    try:
        conn.send({"status": "error", "message": message})
    except (OSError, ValueError):
        pass
