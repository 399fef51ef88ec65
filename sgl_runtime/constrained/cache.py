"""Compiled constraints for one tokenizer: a bounded LRU of futures, compiled off the caller's thread.

The scheduler calls `submit` and polls the future, so one slow compile never stalls the
running batch; a compile that outlives `compile_timeout` fails with ConstraintError.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Optional

from sgl_runtime.constrained.compiler import compile_constraint
from sgl_runtime.constrained.constraint import Constraint
from sgl_runtime.constrained.errors import ConstraintError


class ConstraintCache:
    """LRU of compiled constraints keyed by (kind, spec, options) for one tokenizer."""

    def __init__(self, tokenizer: Any, vocab_size: Optional[int] = None,
                 eos_token_ids: Optional[Iterable[int]] = None, max_size: int = 256,
                 compile_timeout: float = 30.0, num_workers: int = 2) -> None:
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

    def submit(self, kind: str, spec: Any, **options: Any) -> "Future[Constraint]":
        """A future of the compiled constraint (cached; compiled in a worker thread)."""
        key = (kind, _canonical(spec), _canonical(options), id(self.tokenizer))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
            result: Future = Future()
            self._entries[key] = result
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)
        self._pool.submit(self._compile, result, kind, spec, options)
        timer = threading.Timer(self.compile_timeout, _expire, (result, kind, self.compile_timeout))
        timer.daemon = True
        timer.start()
        result.add_done_callback(lambda _f: timer.cancel())
        return result

    def get(self, kind: str, spec: Any, **options: Any) -> Constraint:
        """The compiled constraint, blocking; ConstraintError on a bad spec or a timeout."""
        return self.submit(kind, spec, **options).result()

    def __len__(self) -> int:
        return len(self._entries)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- private ----------------------------------------------------------------------------

    def _compile(self, result: Future, kind: str, spec: Any, options: dict) -> None:
        if result.done():
            return
        try:
            constraint = compile_constraint(kind, spec, self.tokenizer, vocab_size=self.vocab_size,
                                            eos_token_ids=self.eos_token_ids, **options)
            constraint.matcher().bitmask()  # warm the first mask in the worker, not the scheduler
        except ConstraintError as exc:
            _settle(result, exc)
        except Exception as exc:  # noqa: BLE001 - any compiler failure is this request's error
            _settle(result, ConstraintError(f"cannot compile {kind} constraint: {type(exc).__name__}: {exc}"))
        else:
            _settle(result, constraint)


def _canonical(value: Any) -> str:
    if isinstance(value, str):
        return "s:" + value
    try:
        return "j:" + json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return "r:" + repr(value)


def _expire(result: Future, kind: str, timeout: float) -> None:
    _settle(result, ConstraintError(f"compiling the {kind} constraint timed out after {timeout:g} s"))


def _settle(result: Future, outcome: Any) -> None:
    try:
        if isinstance(outcome, BaseException):
            result.set_exception(outcome)
        else:
            result.set_result(outcome)
    except Exception:  # noqa: BLE001 - already settled (timeout vs. completion race)
        pass
