"""Starts the server's child processes, waits for their readiness, watches for their death,
and stops them. Each child reports over a one-way pipe: {"status": "ready"} or
{"status": "error", "message": ...}."""

from __future__ import annotations

import logging
import multiprocessing
import threading
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Optional

logger = logging.getLogger(__name__)

READY_POLL_S = 0.5
STOP_TIMEOUT_S = 10.0


class ChildProcessFailed(RuntimeError):
    """A child process exited or reported an error."""


class ChildProcesses:
    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self.processes: dict[str, multiprocessing.Process] = {}
        self._conns: dict[str, Connection] = {}
        self._errors: dict[str, str] = {}
        self._stopping = threading.Event()

    def start(self, name: str, target: Callable, *args: Any) -> None:
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(target=target, args=(*args, writer), name=name, daemon=False)
        process.start()
        writer.close()
        self.processes[name] = process
        self._conns[name] = reader

    def wait_ready(self) -> dict[str, dict]:
        """Block until every child says it is ready; raise ChildProcessFailed as soon as one fails
        (children wait on each other, e.g. tensor-parallel ranks, so each is watched all along)."""
        infos = {}
        pending = {conn: name for name, conn in self._conns.items()}
        while pending:
            for conn in wait(list(pending), READY_POLL_S):
                name = pending.pop(conn)
                message = self._recv(name)
                if message is None or message.get("status") != "ready":
                    raise ChildProcessFailed(self._describe_failure(name))
                infos[name] = message
            for name in pending.values():
                if not self.processes[name].is_alive():
                    raise ChildProcessFailed(self._describe_failure(name))
        return infos

    def watch(self, on_failure: Callable[[str], None]) -> None:
        """Call `on_failure(message)` from a background thread when any child dies unexpectedly."""
        threading.Thread(target=self._watch, args=(on_failure,), name="child-watchdog", daemon=True).start()

    def stop(self) -> None:
        """SIGTERM every child, then SIGKILL the ones still alive after a grace period."""
        self._stopping.set()
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()
        for name, process in self.processes.items():
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                logger.warning("%s process did not stop; killing it", name)
                process.kill()
                process.join()

    def _watch(self, on_failure: Callable[[str], None]) -> None:
        sentinels = {process.sentinel: name for name, process in self.processes.items()}
        conns = {conn: name for name, conn in self._conns.items()}
        while not self._stopping.is_set():
            for ready in wait(list(sentinels) + list(conns)):
                if ready in conns:
                    if self._recv(conns[ready]) is None:
                        del conns[ready]
                    continue
                if not self._stopping.is_set():
                    name = sentinels[ready]
                    self.processes[name].join(1.0)
                    on_failure(self._describe_failure(name))
                return

    def _recv(self, name: str) -> Optional[dict]:
        try:
            message = self._conns[name].recv()
        except (EOFError, OSError):
            return None
        if message.get("status") == "error":
            self._errors[name] = message.get("message", "")
        return message

    def _describe_failure(self, name: str) -> str:
        process = self.processes[name]
        process.join(0.5)
        code = process.exitcode
        status = "is still running" if code is None else f"exited with code {code}"
        detail = self._errors.get(name)
        return f"the {name} process {status}" + (f": {detail}" if detail else "")
