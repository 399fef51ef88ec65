"""Compiled constraints for one tokenizer: a bounded LRU of futures, compiled off the caller's thread.

This is the one place a constraint is compiled, once per (kind, spec, options). The scheduler
calls `submit` and polls the future, so one slow compile never stalls the running batch.
Regular kinds build their DFA in killable worker processes when `compile_workers` > 0
(compile_workers.py); grammars compile in a worker thread, and so does the last step of a JSON
Schema in the grammar form (the worker returns its grammar text and leaf DFAs; lark's tables
do not pickle). A compile that outlives
`compile_timeout` fails its requests with ConstraintError and is forgotten, so the next request
with that spec tries again: a timeout is a verdict on one attempt, not on the spec.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Optional

from sgl_runtime.constrained.compile_workers import CompileWorkers
from sgl_runtime.constrained.compiler import DFA_KINDS, compile_constraint, resolve_tokenizer, wrap_built
from sgl_runtime.constrained.constraint import Constraint
from sgl_runtime.constrained.errors import ConstraintError, ConstraintTimeout


class ConstraintCache:
    """LRU of compiled constraints keyed by (kind, spec, options) for one tokenizer."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: Optional[int] = None,
        eos_token_ids: Optional[Iterable[int]] = None,
        max_size: int = 256,
        compile_timeout: float = 30.0,
        num_workers: int = 2,
        compile_workers: int = 0,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = None if eos_token_ids is None else tuple(sorted(eos_token_ids))
        self.max_size = max_size
        self.compile_timeout = compile_timeout
        self._entries: "OrderedDict[tuple, Future]" = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="constraint-compile")
        self._processes = CompileWorkers(compile_workers, compile_timeout) if compile_workers else None
        self.stats = {"compiles": 0, "hits": 0, "timeouts": 0, "errors": 0}
        self._prepared: Optional[Future] = None

    def submit(self, kind: str, spec: Any, **options: Any) -> "Future[Constraint]":
        """A future of the compiled constraint (cached; compiled in a worker thread)."""
        key = (kind, _canonical(spec), _canonical(options), id(self.tokenizer))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.stats["hits"] += 1
                return found
            result: Future = Future()
            self._entries[key] = result
            self.stats["compiles"] += 1
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)
        self._pool.submit(self._compile, result, kind, spec, options)
        # a compile process times itself out, but the grammar form of a JSON Schema finishes in
        # this process (lark tables), so a json_schema compile is timed here too
        if self._processes is None or kind not in DFA_KINDS or kind == "json_schema":
            timer = threading.Timer(self.compile_timeout, self._expire, (key, result, kind))
            timer.daemon = True
            timer.start()
            result.add_done_callback(lambda _f: timer.cancel())
        return result

    def start_workers(self, wait: bool = False) -> None:
        """Start the compile processes now rather than on the first constraint, and build the
        vocabulary's tables in a compile thread; with `wait`, block until the processes are ready
        to compile (ConstraintError if one cannot start)."""
        if self._prepared is None:
            self._prepared = self._pool.submit(self._prepare)
        if self._processes is not None:
            self._processes.start()
            if wait:
                self._processes.wait_ready()

    def worker_pids(self) -> list[int]:
        return [] if self._processes is None else self._processes.pids()

    def get(self, kind: str, spec: Any, **options: Any) -> Constraint:
        """The compiled constraint, blocking; ConstraintError on a bad spec or a timeout."""
        return self.submit(kind, spec, **options).result()

    def __len__(self) -> int:
        return len(self._entries)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._processes is not None:
            self._processes.close()

    # ---- private ----------------------------------------------------------------------------

    def _compile(self, result: Future, kind: str, spec: Any, options: dict) -> None:
        if result.done():
            return
        try:
            if self._processes is not None and kind in DFA_KINDS:
                built, description = self._processes.build(kind, spec, options)
                constraint = wrap_built(built, self._vocabulary(), description)
            else:
                constraint = compile_constraint(
                    kind, spec, self.tokenizer, vocab_size=self.vocab_size, eos_token_ids=self.eos_token_ids, **options
                )
            constraint.matcher().bitmask()  # warm the first mask in the worker, not the scheduler
        except ConstraintError as exc:
            self._fail(result, exc)
        except Exception as exc:  # noqa: BLE001 - any compiler failure is this request's error
            self._fail(result, ConstraintError(f"cannot compile {kind} constraint: {type(exc).__name__}: {exc}"))
        else:
            _settle(result, constraint)

    def _prepare(self) -> None:
        """The per-tokenizer tables every constraint's first masks walk (token strings by length
        for automata, the flat byte buffer for grammars), built once ahead of the first request."""
        from sgl_runtime.constrained.grammar.walk import TokenTable

        vocabulary = self._vocabulary()
        vocabulary.walk_table()
        TokenTable.of(vocabulary)

    def _vocabulary(self):
        from sgl_runtime.constrained.vocabulary import Vocabulary

        return Vocabulary.from_tokenizer(resolve_tokenizer(self.tokenizer), self.vocab_size, self.eos_token_ids)

    def _fail(self, result: Future, error: ConstraintError) -> None:
        if _settle(result, error):
            timed_out = isinstance(error, ConstraintTimeout)
            self.stats["timeouts" if timed_out else "errors"] += 1
            if timed_out:
                self._forget(result)

    def _expire(self, key: tuple, result: Future, kind: str) -> None:
        if _settle(
            result, ConstraintTimeout(f"compiling the {kind} constraint took longer than {self.compile_timeout:g} s")
        ):
            self.stats["timeouts"] += 1
            self._forget(result)

    def _forget(self, result: Future) -> None:
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry is result:
                    del self._entries[key]


def _canonical(value: Any) -> str:
    if isinstance(value, str):
        return "s:" + value
    try:
        return "j:" + json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return "r:" + repr(value)


def _settle(result: Future, outcome: Any) -> bool:
    """Settle `result` unless it already was (timeout vs. completion race); whether this call did."""
    try:
        if isinstance(outcome, BaseException):
            result.set_exception(outcome)
        else:
            result.set_result(outcome)
    except Exception:  # noqa: BLE001 - already settled
        return False
    return True
