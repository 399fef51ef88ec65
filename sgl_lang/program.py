"""SglFunction: a program made by `@function`, with run / run_batch / bind / trace / cache_prefix."""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Union

from sgl_lang.backend.base import BackendError, BaseBackend
from sgl_lang.global_config import resolve_backend
from sgl_lang.interpreter import ProgramError, StreamExecutor
from sgl_lang.program_state import ProgramState
from sgl_lang.sampling_params import DEFAULT_SAMPLING, SglSamplingParams, split_sampling_kwargs
from sgl_lang.tracer import TracedProgram, trace_program


class SglFunction:
    """A program `def prog(s, *args, **kwargs)`; keyword arguments named like sampling
    parameters (max_new_tokens, temperature, ...) given to run/run_batch become the program's
    defaults for every gen."""

    def __init__(
        self, func: Callable, num_api_spec_tokens: Optional[int] = None, bind_arguments: Optional[dict] = None
    ):
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens
        self.bind_arguments = bind_arguments or {}
        self.signature = inspect.signature(func)
        if not self.signature.parameters:
            raise TypeError(f"{func.__name__} must take the program state as its first parameter")

    def bind(self, **kwargs: Any) -> "SglFunction":
        """A copy of this program with some arguments fixed."""
        return SglFunction(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calling a program inside another program's body runs it on that state (`prog(s, ...)`)."""
        if args and isinstance(args[0], ProgramState):
            return self.func(args[0], *args[1:], **{**self.bind_arguments, **kwargs})
        return self.run(*args, **kwargs)

    # Running
    def run(
        self, *args: Any, stream: bool = False, backend: Optional[BaseBackend] = None, **kwargs: Any
    ) -> ProgramState:
        """Run once. Without stream, waits for the program and raises ProgramError (with the
        server's message, and `.state`) if it failed. With stream=True, returns at once; read
        with `state.text_iter()` and check `state.error()`."""
        sampling, arguments = self._prepare(args, kwargs)
        backend = resolve_backend(backend)
        if stream:
            return self._start(backend, sampling, args, arguments, stream=True)
        state = self._new_state(backend, sampling)
        try:
            self._body(state, args, arguments, catch=False)
        except ProgramError:
            if state.stream_executor.error_ is None:
                raise
        if state.error() is not None:
            raise ProgramError(f"program {self.func.__name__} failed: {state.error()}", state) from state.error()
        return state

    def run_batch(
        self,
        batch_kwargs: list,
        *,
        backend: Optional[BaseBackend] = None,
        num_threads: Union[int, str] = "auto",
        progress_bar: bool = False,
        **sampling_kwargs: Any,
    ) -> list:
        """Run once per kwargs dict, concurrently; states come back in input order and a failing
        program records its error in its own state (`state.error()`) without stopping the others."""
        sampling, extra = split_sampling_kwargs(sampling_kwargs)
        if extra:
            raise TypeError(f"run_batch got unknown keyword(s) {', '.join(sorted(extra))}")
        prepared = [self._prepare((), dict(kwargs, **sampling)) for kwargs in batch_kwargs]
        backend = resolve_backend(backend)
        if len(batch_kwargs) > 1:
            with contextlib.suppress(BackendError):  # a broken backend shows in each program's state
                self.cache_prefix(backend)
        workers = min(len(batch_kwargs), 64) if num_threads == "auto" else int(num_threads)
        bar = _progress_bar(len(batch_kwargs)) if progress_bar else None
        lock = threading.Lock()

        def run_one(item: tuple) -> ProgramState:
            state = self._execute(backend, item[0], (), item[1], catch=True)
            if bar is not None:
                with lock:
                    bar.update(1)
            return state

        try:
            if workers <= 1:
                return [run_one(item) for item in prepared]
            with ThreadPoolExecutor(max_workers=workers) as pool:
                return list(pool.map(run_one, prepared))
        finally:
            if bar is not None:
                bar.close()

    # Tracing and pre-caching
    def trace(self, *args: Any, backend: Optional[BaseBackend] = None, **kwargs: Any) -> TracedProgram:
        """The program's constant prefix (arguments not given are treated as unknown)."""
        backend = resolve_backend(backend, required=False)
        template = backend.get_chat_template() if backend is not None else BaseBackend().get_chat_template()
        return trace_program(self.func, template, args, {**self.bind_arguments, **kwargs})

    def cache_prefix(self, backend: Optional[BaseBackend] = None, **kwargs: Any) -> str:
        """Send the program's constant prefix to the backend so later runs hit the cache; returns it."""
        backend = resolve_backend(backend)
        prefix = self.trace(backend=backend, **kwargs).prefix
        backend.cache_prefix(prefix)
        return prefix

    # Internals
    def _prepare(self, args: tuple, kwargs: dict) -> tuple[SglSamplingParams, dict]:
        """Split sampling defaults from program arguments and check both before anything is sent."""
        sampling_kwargs, arguments = split_sampling_kwargs(kwargs)
        sampling = DEFAULT_SAMPLING.override(SglSamplingParams.from_kwargs(**sampling_kwargs))
        arguments = {**self.bind_arguments, **arguments}
        try:
            self.signature.bind(None, *args, **arguments)
        except TypeError as e:
            raise TypeError(f"{self.func.__name__}: {e}") from e
        return sampling, arguments

    def _start(
        self, backend: BaseBackend, sampling: SglSamplingParams, args: tuple, arguments: dict, stream: bool
    ) -> ProgramState:
        """Run the body on a background thread and return its state at once."""
        state = self._new_state(backend, sampling, stream)
        state.body_thread = threading.Thread(target=self._body, args=(state, args, arguments, True), daemon=True)
        state.body_thread.start()
        return state

    def _execute(
        self, backend: BaseBackend, sampling: SglSamplingParams, args: tuple, arguments: dict, catch: bool = False
    ) -> ProgramState:
        state = self._new_state(backend, sampling)
        self._body(state, args, arguments, catch)
        return state

    def _new_state(self, backend: BaseBackend, sampling: SglSamplingParams, stream: bool = False) -> ProgramState:
        return ProgramState(
            StreamExecutor(backend, sampling, stream=stream, num_api_spec_tokens=self.num_api_spec_tokens)
        )

    def _body(self, state: ProgramState, args: tuple, arguments: dict, catch: bool) -> None:
        executor = state.stream_executor
        try:
            state.ret_value = self.func(state, *args, **arguments)
        except Exception as e:
            if not catch:
                executor.end_all()
                raise
            executor.fail(e)
        error = executor.end_all()
        if error is not None and executor.error_ is None:
            executor.fail(error)


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=os.environ.get("SGL_LANG_NO_PROGRESS") == "1")
