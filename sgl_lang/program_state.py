"""ProgramState: the `s` a program body writes to and a caller reads results from."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from typing import Any, AsyncIterator, Iterator, Optional, Union

from sgl_lang.interpreter import ProgramError, StreamExecutor
from sgl_lang.ir import (
    SglCommitLazy,
    SglExpr,
    SglExprList,
    SglRoleBegin,
    SglRoleEnd,
    SglVarScopeBegin,
    SglVarScopeEnd,
    to_expr,
)

_STOP = object()


class ProgramState:
    """Handle on one running (or finished) program; reads block until the values exist."""

    def __init__(self, stream_executor: StreamExecutor):
        self.stream_executor = stream_executor
        self.ret_value: Any = None
        self.body_thread: Optional[threading.Thread] = None  # set for stream=True runs

    def __del__(self) -> None:
        executor = getattr(self, "stream_executor", None)
        if executor is not None:
            executor.request_end()

    # Writing
    def __iadd__(self, other: Any) -> "ProgramState":
        if isinstance(other, ProgramState):  # `s += other_program(...)`: append what it produced
            other.sync()
            if other.error() is not None:
                raise ProgramError(f"the program added to this one failed: {other.error()}") from other.error()
            for name, value in other.stream_executor.variables.items():
                self.set_var(name, value)
            other = other.text()
        self.stream_executor.submit(to_expr(other))
        return self

    def __setitem__(self, name: str, value: Any) -> None:
        self.set_var(name, value)

    def system(self, expr: Any = None):
        return self._role("system", expr)

    def user(self, expr: Any = None):
        return self._role("user", expr)

    def assistant(self, expr: Any = None):
        return self._role("assistant", expr)

    def _role(self, role: str, expr: Any):
        if expr is not None:
            self += SglExprList([SglRoleBegin(role), to_expr(expr), SglRoleEnd(role)])
            return None
        return self._scope(SglRoleBegin(role), SglRoleEnd(role))

    def var_scope(self, name: str):
        """`with s.var_scope("x"): ...` stores all text appended inside the block as variable x."""
        return self._scope(SglVarScopeBegin(name), SglVarScopeEnd(name))

    @contextmanager
    def _scope(self, begin: SglExpr, end: SglExpr):
        self.stream_executor.submit(begin)
        yield
        self.stream_executor.submit(end)

    # Reading
    def __getitem__(self, name: str) -> Any:
        return self.get_var(name)

    def __contains__(self, name: str) -> bool:
        return name in self.stream_executor.variable_event or name in self.stream_executor.variables

    def get_var(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self.stream_executor.set_var(name, value)

    def get_meta_info(self, name: str) -> dict:
        """Meta info of gen/select `name` (token counts, cached_tokens, finish_reason, logprobs, scores)."""
        self.get_var(name)
        return self.stream_executor.meta_info.get(name, {})

    def text(self) -> str:
        self.sync()
        return self.stream_executor.text_

    def messages(self) -> list:
        """The chat turns so far as an OpenAI-style list of {"role", "content"}."""
        self.sync()
        return [dict(message) for message in self.stream_executor.messages_]

    def sync(self) -> "ProgramState":
        """Wait for every submitted node (and, for a streaming run, for the program body)."""
        body = self.body_thread
        if body is not None and body is not threading.current_thread():
            body.join()
        self.stream_executor.sync()
        return self

    def error(self) -> Optional[BaseException]:
        """The exception that stopped the program, or None."""
        self.sync()
        return self.stream_executor.error_

    # Forking
    def fork(self, size: int = 1) -> "ProgramStateGroup":
        """`size` branches that continue from this state's text; the shared prefix is committed
        to the backend first (for size > 1) so every branch hits the prefix cache."""
        if size < 1:
            raise ValueError(f"fork size must be >= 1, got {size}")
        if size > 1:
            self.stream_executor.submit(SglCommitLazy())
        self.sync()
        branches = [ProgramState(self.stream_executor.fork_copy()) for _ in range(size)]
        return ProgramStateGroup(branches, self)

    def copy(self) -> "ProgramState":
        return self.fork(1)[0]

    # Streaming
    def text_iter(self, var_name: Optional[str] = None) -> Iterator[str]:
        """Chunks of the program's text (or of one variable) as they are produced."""
        executor, sent = self.stream_executor, 0
        while True:
            with executor.changed:
                executor.changed.wait_for(lambda: self._stream_ready(var_name, sent))  # noqa: B023 - called at once
                current, done = self._stream_snapshot(var_name)
            if len(current) > sent:
                yield current[sent:]
                sent = len(current)
            elif done:
                return

    def _stream_snapshot(self, var_name: Optional[str]) -> tuple[str, bool]:
        executor = self.stream_executor
        if var_name is None:
            return executor.text_, executor.finished or executor.error_ is not None
        event = executor.variable_event.get(var_name)
        done = executor.finished or executor.error_ is not None or (event is not None and event.is_set())
        return executor.partial_values.get(var_name, ""), done

    def _stream_ready(self, var_name: Optional[str], sent: int) -> bool:
        current, done = self._stream_snapshot(var_name)
        return done or len(current) > sent

    def _meta_iter(self, var_name: str) -> Iterator[tuple[str, dict]]:
        """(chunk, meta_info) pairs of a streamed gen; meta_info carries that chunk's logprobs."""
        executor, sent = self.stream_executor, 0

        def ready() -> bool:
            return len(executor.stream_chunks.get(var_name, ())) > sent or self._stream_snapshot(var_name)[1]

        while True:
            with executor.changed:
                executor.changed.wait_for(ready)
                chunks = list(executor.stream_chunks.get(var_name, ()))
                done = self._stream_snapshot(var_name)[1]
            if len(chunks) > sent:
                yield from chunks[sent:]
                sent = len(chunks)
            elif done:
                return

    async def text_async_iter(
        self, var_name: Optional[str] = None, return_meta_data: bool = False
    ) -> AsyncIterator[Any]:
        """`text_iter` for asyncio code: the blocking waits run in the default executor. With
        return_meta_data=True (a variable's stream only), yields (chunk, meta_info) pairs."""
        if return_meta_data and var_name is None:
            raise ValueError("text_async_iter(return_meta_data=True) needs a variable name")
        chunks = self._meta_iter(var_name) if return_meta_data and var_name is not None else self.text_iter(var_name)
        loop = asyncio.get_running_loop()
        while True:
            chunk = await loop.run_in_executor(None, next, chunks, _STOP)
            if chunk is _STOP:
                return
            yield chunk if return_meta_data else str(chunk)

    def __aiter__(self) -> AsyncIterator[str]:
        return self.text_async_iter()

    def __repr__(self) -> str:
        return f"ProgramState({self.text()!r})"


class ProgramStateGroup:
    """The branches returned by `fork`; `join()` gathers their new variables into the parent."""

    def __init__(self, states: list, parent: ProgramState):
        self.states = states
        self.parent = parent

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __setitem__(self, i: int, value: Any) -> None:
        """`forks[i] += x` appends to branch i in place (Python then stores the same branch back)."""
        if value is not self.states[i]:
            raise TypeError("fork branches cannot be replaced; use `forks[i] += ...`")

    def __iadd__(self, other: Union[Any, list]) -> "ProgramStateGroup":
        """Append to every branch (a list or tuple appends its i-th item to branch i, a function
        called with i gives branch i's item)."""
        if callable(other) and not isinstance(other, SglExpr):
            other = [other(i) for i in range(len(self.states))]
        if isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"got {len(other)} items for {len(self.states)} branches")
            for state, item in zip(self.states, other):
                state += item
        else:
            for state in self.states:
                state += other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for every branch. gather_variable: each variable a branch created becomes a list in
        the parent. concate_and_append: the text each branch added is appended to the parent, in order."""
        if mode not in ("gather_variable", "concate_and_append"):
            raise ValueError(f"join mode {mode!r} is not supported; use 'gather_variable' or 'concate_and_append'")
        if mode == "concate_and_append":
            return self._concatenate()
        parent = self.parent.stream_executor
        existing = set(parent.variables)
        gathered: dict = {}
        for i, state in enumerate(self.states):
            executor = state.stream_executor
            executor.end()
            if executor.error_ is not None and parent.error_ is None:
                parent.fail(ProgramError(f"fork branch {i} failed: {executor.error_}"))
            for name in executor.variables:
                if name not in existing:
                    gathered.setdefault(name, []).append(executor.variables[name])
        for name, values in gathered.items():
            parent.set_var(name, values)

    def _concatenate(self) -> None:
        start = len(self.parent.stream_executor.text_)
        added = []
        for i, state in enumerate(self.states):
            state.stream_executor.end()
            if state.stream_executor.error_ is not None:
                raise ProgramError(f"fork branch {i} failed: {state.stream_executor.error_}")
            added.append(state.stream_executor.text_[start:])
        self.parent += "".join(added)
