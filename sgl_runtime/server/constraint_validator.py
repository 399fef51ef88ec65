"""Validates constraints for the main process in killable worker processes, so that a
pathological regex, schema or grammar costs at most `timeout` seconds of one worker's CPU and
never the server's event loop (or its GIL): a worker past the timeout is killed and replaced.

Outcomes (ok, the compiler's message, a timeout) are kept in a bounded LRU keyed by a digest
of (kind, spec), so a repeated constraint is answered at once without compiling again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import multiprocessing
import pickle
import signal
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Optional

logger = logging.getLogger(__name__)

READY, OK, ERROR = "ready", "ok", "error"
WORKER_START_S = 60.0
RESTART_DELAY_S = 5.0


@dataclass(frozen=True)
class _Outcome:
    ok: bool
    message: str = ""


class ValidatorUnavailable(RuntimeError):
    """The validator's worker process cannot start (a server fault, not the request's)."""


class ConstraintValidator:
    """A pool of `num_workers` processes that compile constraints (and their first mask) with a
    wall-clock `timeout` each; `check` raises ConstraintError with the compiler's message."""

    def __init__(self, tokenizer_path: str, vocab_size: int, eos_token_ids: Iterable[int], timeout: float,
                 chat_template: Optional[str] = None, num_workers: int = 2, cache_size: int = 256) -> None:
        if num_workers < 1 or cache_size < 1 or timeout <= 0:
            raise ValueError(f"need num_workers >= 1, cache_size >= 1, timeout > 0; got "
                             f"{num_workers}, {cache_size}, {timeout}")
        self._worker_args = (tokenizer_path, chat_template, vocab_size, tuple(sorted(eos_token_ids)))
        self.timeout = timeout
        self.num_workers = num_workers
        self.cache_size = cache_size
        self._outcomes: "OrderedDict[tuple[str, str], _Outcome]" = OrderedDict()
        self._in_flight: dict[tuple[str, str], asyncio.Task] = {}
        self._idle: Optional[asyncio.Queue] = None
        self._workers: list[_Worker] = []
        self._bring_up: set[asyncio.Task] = set()
        self._start_error = ""
        # a request waits this long at most for a free worker (several may be compiling ahead)
        self._max_wait = WORKER_START_S + 4 * timeout

    # ---------------------------------------------------------------- public
    def start(self) -> None:
        """Start the worker processes (call from the event loop's thread: a worker dies with it)."""
        if self._idle is None:
            self._idle = asyncio.Queue()
            for _ in range(self.num_workers):
                self._add_worker()

    async def check(self, kind: str, spec: Any) -> None:
        """Return when `spec` compiles within the timeout; raise ConstraintError otherwise."""
        from sgl_runtime.constrained import ConstraintError

        outcome = await self.validate(kind, spec)
        if not outcome.ok:
            raise ConstraintError(outcome.message)

    async def validate(self, kind: str, spec: Any) -> _Outcome:
        """The (cached) outcome of compiling `spec`; concurrent callers share one compile."""
        try:
            key = (kind, _digest(kind, spec))
        except RecursionError:
            return _Outcome(False, f"the {kind} constraint is nested too deeply")
        found = self._outcomes.get(key)
        if found is not None:
            self._outcomes.move_to_end(key)
            return found
        task = self._in_flight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._compile(kind, spec))
            self._in_flight[key] = task
            task.add_done_callback(lambda t: self._settle(key, t))
        # shield: a caller that goes away must not cancel the compile others wait on
        return await asyncio.shield(task)

    def cached_outcomes(self) -> int:
        return len(self._outcomes)

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.process.is_alive()]

    def close(self) -> None:
        """Stop every worker process."""
        for task in list(self._bring_up):
            task.cancel()
        for worker in self._workers:
            worker.kill()
        self._workers.clear()

    # ---------------------------------------------------------------- private
    async def _compile(self, kind: str, spec: Any) -> _Outcome:
        worker = await self._free_worker()
        try:
            outcome = await worker.run(kind, spec, self.timeout)
        except asyncio.TimeoutError:
            logger.warning("compiling a %s constraint took longer than %g s; killing validator pid %d",
                           kind, self.timeout, worker.process.pid)
            self._replace(worker)
            return _Outcome(False, f"compiling the {kind} constraint took longer than {self.timeout:g} s")
        except BaseException:
            self._replace(worker)
            raise
        if worker.process.is_alive():
            self._idle.put_nowait(worker)
        else:
            self._replace(worker)
        return outcome

    async def _free_worker(self) -> "_Worker":
        """An idle worker that has loaded the tokenizer (one found dead is replaced)."""
        self.start()
        deadline = time.monotonic() + self._max_wait
        while True:
            try:
                worker = await asyncio.wait_for(self._idle.get(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise ValidatorUnavailable(
                    f"no constraint validator process became free within {self._max_wait:g} s"
                    + (f" (last start-up error: {self._start_error})" if self._start_error else "")) from None
            if worker.process.is_alive():
                return worker
            self._replace(worker)

    def _settle(self, key: tuple[str, str], task: asyncio.Task) -> None:
        self._in_flight.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return
        self._outcomes[key] = task.result()
        while len(self._outcomes) > self.cache_size:
            self._outcomes.popitem(last=False)

    def _replace(self, worker: "_Worker") -> None:
        worker.kill()
        if worker in self._workers:
            self._workers.remove(worker)
        self._add_worker()

    def _add_worker(self, delay: float = 0.0) -> None:
        worker = _Worker(self._worker_args, delay)
        self._workers.append(worker)
        self._bring_up.add(asyncio.ensure_future(self._when_ready(worker)))

    async def _when_ready(self, worker: "_Worker") -> None:
        try:
            await worker.wait_ready()
        except ValidatorUnavailable as exc:
            logger.error("%s; starting another in %g s", exc, RESTART_DELAY_S)
            self._start_error = str(exc)
            worker.kill()
            if worker in self._workers:
                self._workers.remove(worker)
                self._add_worker(RESTART_DELAY_S)
        else:
            self._start_error = ""
            self._idle.put_nowait(worker)
        finally:
            self._bring_up.discard(asyncio.current_task())


class _Worker:
    """One validator process and the main process's end of its pipe."""

    def __init__(self, worker_args: tuple, delay: float = 0.0) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child_conn = context.Pipe()
        self._start_limit = delay + WORKER_START_S
        self.process = context.Process(target=_worker_main, args=(child_conn, delay, *worker_args),
                                       name="constraint-validator", daemon=True)
        self.process.start()
        child_conn.close()
        self._ready = False

    async def wait_ready(self) -> None:
        if self._ready:
            return
        try:
            status, detail = await self._receive(self._start_limit)
        except asyncio.TimeoutError:
            status, detail = "timeout", f"not ready after {self._start_limit:g} s"
        if status != READY:
            raise ValidatorUnavailable(f"the constraint validator process failed to start: {detail}")
        self._ready = True

    async def run(self, kind: str, spec: Any, timeout: float) -> _Outcome:
        """Compile in the worker; asyncio.TimeoutError past `timeout` (the worker is then unusable)."""
        try:
            self.conn.send((kind, spec))
        except (pickle.PicklingError, TypeError, ValueError, RecursionError) as exc:  # nothing was written
            return _Outcome(False, f"cannot send the {kind} constraint to the validator: {exc}")
        status, detail = await self._receive(timeout)
        if status == OK:
            return _Outcome(True)
        if status == ERROR:
            return _Outcome(False, detail)
        return _Outcome(False, f"compiling the {kind} constraint crashed the validator process ({detail})")

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(1.0)
        self.conn.close()

    async def _receive(self, timeout: Optional[float]) -> tuple[str, str]:
        """The worker's next message, awaited without blocking the event loop."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future = loop.create_future()
        fd = self.conn.fileno()

        def on_readable() -> None:
            if result.done():
                return
            try:
                result.set_result(self.conn.recv())
            except (EOFError, OSError):
                self.process.join(1.0)
                result.set_result(("exited", f"exit code {self.process.exitcode}"))

        loop.add_reader(fd, on_readable)
        try:
            return await asyncio.wait_for(result, timeout)
        finally:
            loop.remove_reader(fd)


def _digest(kind: str, spec: Any) -> str:
    """A fixed-size key: the cache holds digests, not (possibly huge) specs."""
    if isinstance(spec, str):
        text = "s:" + spec
    else:
        try:
            text = "j:" + json.dumps(spec, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            text = "r:" + repr(spec)
    return hashlib.sha256(f"{kind}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()


def _worker_main(conn, delay: float, tokenizer_path: str, chat_template: Optional[str], vocab_size: int,
                 eos_token_ids: tuple) -> None:
    """Load the tokenizer once, then compile each (kind, spec) received and answer ok or the error."""
    from sgl_runtime.process.ipc import _die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the parent stops us
    _die_with_parent()
    time.sleep(delay)  # a restart after a failed start-up backs off
    try:
        from sgl_runtime.constrained import ConstraintError, compile_constraint
        from sgl_runtime.tokenizer_utils import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path, chat_template)
        compile_constraint("regex", "a", tokenizer, vocab_size=vocab_size, eos_token_ids=eos_token_ids)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send((READY, ""))
    while True:
        try:
            kind, spec = conn.recv()
        except (EOFError, OSError):
            return
        try:
            constraint = compile_constraint(kind, spec, tokenizer, vocab_size=vocab_size, eos_token_ids=eos_token_ids)
            constraint.matcher().bitmask()
            answer = (OK, "")
        except ConstraintError as exc:
            answer = (ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - any compiler failure is this constraint's error
            answer = (ERROR, f"cannot compile {kind} constraint: {type(exc).__name__}: {exc}")
        conn.send(answer)
