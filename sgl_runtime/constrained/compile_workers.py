"""Killable processes that build the byte DFAs of regular constraints (regex, choices,
json_schema), so that a pathological spec costs at most `timeout` seconds of one worker's CPU
and never the scheduler's GIL: a worker past its timeout is killed and replaced.

The DFA is the expensive, tokenizer-independent part of a compile; the worker hands it back
(pickled numpy tables) and the caller wraps it with its own vocabulary. Nothing is compiled
twice: the worker's result is what the scheduler uses.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sgl_runtime.constrained.errors import ConstraintError, ConstraintTimeout

logger = logging.getLogger(__name__)

OK, ERROR, READY = "ok", "error", "ready"
WORKER_START_S = 60.0


class CompileWorkers:
    """`build(kind, spec, options) -> (ByteDFA or SchemaGrammar, description)` in one of `num_workers` processes."""

    def __init__(self, num_workers: int, timeout: float) -> None:
        if num_workers < 1 or timeout <= 0:
            raise ValueError(f"need num_workers >= 1 and timeout > 0; got {num_workers}, {timeout}")
        self.num_workers = num_workers
        self.timeout = timeout
        self._idle: "queue.Queue[_Worker]" = queue.Queue()
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._closed = False

    def start(self) -> None:
        """Start the worker processes now (they also start on first use)."""
        with self._lock:
            while len(self._workers) < self.num_workers and not self._closed:
                worker = _Worker()
                self._workers.append(worker)
                self._idle.put(worker)

    def build(self, kind: str, spec: Any, options: dict) -> tuple[Any, str]:
        """Blocking; ConstraintError for a bad spec, a timeout or a worker that died on it. The
        result is a ByteDFA, or a JSON Schema's SchemaGrammar (see compiler.build_dfa)."""
        self.start()
        while True:
            worker = self._idle.get()
            if worker.alive():
                break
            self._replace(worker)  # died while idle: its replacement takes the spec
        try:
            return worker.build(kind, spec, options, self.timeout)
        except _WorkerLost as exc:
            self._replace(worker)
            raise ConstraintTimeout(str(exc)) from None
        finally:
            if worker.alive():
                self._idle.put(worker)

    def wait_ready(self) -> None:
        """Block until every started worker has imported the compiler (ConstraintError if one
        cannot), so a server reports healthy only once its first constraint compiles at full speed."""
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.wait_ready()

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.alive()]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for worker in self._workers:
                worker.kill()
            self._workers.clear()

    def _replace(self, worker: "_Worker") -> None:
        with self._lock:
            worker.kill()
            if worker in self._workers:
                self._workers.remove(worker)
            if not self._closed:
                fresh = _Worker()
                self._workers.append(fresh)
                self._idle.put(fresh)


class _WorkerLost(Exception):
    """The worker timed out or died: it is unusable and is replaced."""


class _Worker:
    """One compile process (`python -m` this module, so the caller's `__main__` is never
    re-imported, as multiprocessing's spawn would) and our end of its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[2])  # the directory holding sgl_runtime/
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, *sys.path])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env=env,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self._ready = False

    def alive(self) -> bool:
        return self.process.poll() is None and not self.conn.closed

    def wait_ready(self) -> None:
        if not self._ready:
            try:
                started = self._receive(WORKER_START_S, "start")[0] == READY
            except _WorkerLost as exc:
                raise ConstraintError(f"the constraint compile worker failed to start: {exc}") from None
            if not started:
                raise ConstraintError("the constraint compile worker failed to start")
            self._ready = True

    def build(self, kind: str, spec: Any, options: dict, timeout: float) -> tuple[Any, str]:
        if not self._ready:
            try:
                self.wait_ready()
            except ConstraintError as exc:
                raise _WorkerLost(str(exc)) from None
        try:
            self.conn.send((kind, spec, options))
        except (pickle.PicklingError, TypeError, ValueError, RecursionError) as exc:  # nothing was written
            raise ConstraintError(f"cannot send the {kind} constraint to the compiler: {exc}") from None
        except OSError as exc:
            raise _WorkerLost(f"the compile worker went away ({exc})") from None
        answer = self._receive(timeout, kind)
        if answer[0] == ERROR:
            raise ConstraintError(answer[1])
        return answer[1], answer[2]

    def _receive(self, timeout: float, what: str) -> tuple:
        if not self.conn.poll(timeout):
            logger.warning(
                "compiling a %s constraint took longer than %g s; killing compile worker pid %d",
                what,
                timeout,
                self.process.pid,
            )
            raise _WorkerLost(f"compiling the {what} constraint took longer than {timeout:g} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self._wait(1.0)
            raise _WorkerLost(
                f"compiling the {what} constraint crashed the compile worker (exit code {code})"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self._wait(1.0)
        self.conn.close()

    def _wait(self, timeout: float):
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def _worker_main(conn) -> None:
    """Build each (kind, spec, options) received and answer (ok, dfa, description) or (error, message)."""
    from sgl_runtime.process.ipc import die_with_parent, tune_gc

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the parent stops us
    die_with_parent()
    tune_gc()
    from sgl_runtime.constrained.compiler import build_dfa

    conn.send((READY,))
    while True:
        try:
            kind, spec, options = conn.recv()
        except (EOFError, OSError):
            return
        try:
            dfa, description = build_dfa(kind, spec, options)
            answer: tuple = (OK, dfa, description)
        except ConstraintError as exc:
            answer = (ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - any compiler failure is this constraint's error
            answer = (ERROR, f"cannot compile {kind} constraint: {type(exc).__name__}: {exc}")
        conn.send(answer)


if __name__ == "__main__":  # a worker: python -m sgl_runtime.constrained.compile_workers FD
    _worker_main(Connection(int(sys.argv[1])))
