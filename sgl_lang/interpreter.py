"""StreamExecutor: runs one program's IR nodes in order on its own thread against a backend.

The program body submits nodes; the worker thread appends constant text locally, calls the
backend for gen/select with the full text so far, and publishes variables through events so
that `state[name]` blocks until the value exists. A failing node stores the error, releases
every waiter, and drops the rest of the queue.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Optional

from sgl_lang.backend.base import BaseBackend
from sgl_lang.chat_template import ChatTemplate
from sgl_lang.ir import (
    SglCommitLazy,
    SglConstantText,
    SglExpr,
    SglGen,
    SglRoleBegin,
    SglRoleEnd,
    SglSelect,
    SglVarScopeBegin,
    SglVarScopeEnd,
    anonymous_name,
)
from sgl_lang.sampling_params import SglSamplingParams
from sgl_lang.speculative import SpeculativeText

_END = object()


class ProgramError(RuntimeError):
    """A program failed; `state` holds what it produced before the failure."""

    def __init__(self, message: str, state: Any = None):
        super().__init__(message)
        self.state = state


STREAMED_LOGPROB_KEYS = ("output_token_logprobs", "output_top_logprobs")


class StreamExecutor:
    """Executes the nodes of one program (or one fork branch) sequentially."""

    def __init__(
        self,
        backend: BaseBackend,
        default_sampling: SglSamplingParams,
        stream: bool = False,
        chat_template: Optional[ChatTemplate] = None,
        num_api_spec_tokens: Optional[int] = None,
    ):
        self.backend = backend
        self.num_api_spec_tokens = num_api_spec_tokens
        self.speculation = SpeculativeText() if num_api_spec_tokens else None
        self.default_sampling = default_sampling
        self.stream = stream
        self.chat_template = chat_template or backend.get_chat_template()
        self.text_ = ""
        self.messages_: list = []
        self.variables: dict = {}
        self.meta_info: dict = {}
        self.variable_event: dict = {}
        self.partial_values: dict = {}  # variable -> text generated so far (streaming)
        self.stream_chunks: dict = {}  # variable -> [(text, meta_info)] as streamed (meta's logprobs are per chunk)
        self.error_: Optional[BaseException] = None
        self.cur_role: Optional[str] = None
        self.cur_role_begin_pos = 0
        self.var_scope_begin: dict = {}
        self.children: list = []  # fork branches, ended and checked when the program ends
        self.changed = threading.Condition()
        self.finished = False
        self.end_requested = False
        self.queue: queue.Queue = queue.Queue()
        self.worker = self._start_worker()

    def _start_worker(self) -> threading.Thread:
        worker = threading.Thread(target=self._work, daemon=True, name="sgl-executor")
        worker.start()
        return worker

    # Called from the program body
    def submit(self, expr: SglExpr) -> None:
        if self.end_requested:  # a finished program being extended (e.g. after run()): resume it
            self.end()
            self.worker.join()
            with self.changed:
                self.finished = self.end_requested = False
            self.worker = self._start_worker()
        for node in expr.flatten():
            if isinstance(node, (SglGen, SglSelect)):
                if node.name is None:
                    node.name = anonymous_name(type(node).__name__[3:].lower())
                self._register(node.name)
            elif isinstance(node, SglVarScopeEnd):
                self._register(node.name)
            elif hasattr(node, "target_name") and node.target_name() is not None:  # separate_reasoning
                self._register(node.target_name() + "_reasoning_content")
            self.queue.put(node)

    def sync(self) -> None:
        """Block until every submitted node has run (or the program failed)."""
        self.queue.join()

    def end(self) -> None:
        """No more nodes: the worker finishes after the queue drains; waits for it."""
        self.request_end()
        self.queue.join()

    def request_end(self) -> None:
        """No more nodes: the worker finishes after the queue drains."""
        if not self.end_requested:
            self.end_requested = True
            self.queue.put(_END)

    def end_all(self) -> Optional[BaseException]:
        """End this executor and every fork branch; return the first error among them."""
        self.end()
        errors = [child.end_all() for child in self.children]
        return self.error_ or next((e for e in errors if e is not None), None)

    def get_var(self, name: str) -> Any:
        event = self.variable_event.get(name)
        if event is None and name not in self.variables:
            raise KeyError(f"program has no variable {name!r}")
        if event is not None:
            event.wait()
        if name not in self.variables:
            raise ProgramError(f"variable {name!r} was not produced: {self.error_}") from self.error_
        return self.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        self.variables[name] = value
        self._register(name).set()

    def fork_copy(self) -> "StreamExecutor":
        """A new executor starting from this one's text, messages, role and variables."""
        child = StreamExecutor(
            self.backend, self.default_sampling, self.stream, self.chat_template, self.num_api_spec_tokens
        )
        child.text_, child.messages_ = self.text_, list(self.messages_)
        child.cur_role, child.cur_role_begin_pos = self.cur_role, self.cur_role_begin_pos
        child.variables, child.meta_info = dict(self.variables), dict(self.meta_info)
        self.children.append(child)
        for name in child.variables:
            child._register(name).set()
        return child

    # Worker thread
    def _work(self) -> None:
        while True:
            node = self.queue.get()
            try:
                if node is _END:
                    self._finish()
                    return
                if self.error_ is None:
                    self._execute(node)
            except BaseException as e:  # noqa: BLE001 - recorded for the program, re-raised by run()
                self.fail(e)
            finally:
                self.queue.task_done()

    def _execute(self, node: SglExpr) -> None:
        handler = getattr(self, "_run_" + type(node).__name__[3:])
        handler(node)

    def _run_ConstantText(self, node: SglConstantText) -> None:
        self._append_constant(node.value)

    def _run_Gen(self, node: SglGen) -> None:
        params = self.default_sampling.override(node.sampling_params)
        self.partial_values[node.name] = ""
        value = self._speculative_value(params)
        if value is not None:
            self._append(value, node.name)
            self._publish(node.name, value, {"speculative": True})
            return
        if self.stream and (params.n or 1) > 1:
            raise ValueError(
                f"gen {node.name!r}: n > 1 cannot stream (its n texts arrive together); run it without stream=True"
            )
        if self.stream:
            meta: dict = {}
            chunks = self.stream_chunks.setdefault(node.name, [])
            for chunk, meta in self.backend.generate_stream(self, params):
                self._record_chunk(chunks, chunk, meta)
                self._append(chunk, node.name)
            value = self.partial_values[node.name]
        else:
            value, meta = self.backend.generate(self, params)
            self._append(value[0] if isinstance(value, list) else value, node.name)  # n > 1: the first continues
        self._publish(node.name, value, meta)

    def _speculative_value(self, params: SglSamplingParams) -> Optional[str]:
        """The gen's value from over-generated text (one call for several gens), if possible."""
        spec = self.speculation
        if spec is None or self.stream or not SpeculativeText.eligible(params):
            return None
        value = spec.take(params)
        if value is None:
            prediction = self.backend.generate_speculative(self, params, self.num_api_spec_tokens or 0)
            if prediction is None:
                return None
            spec.reset(*prediction)
            return spec.take(params)
        spec.filled.append(value)
        return value

    def _run_SeparateReasoning(self, node) -> None:
        """Split the preceding gen's value: answer under its name, reasoning under NAME_reasoning_content."""
        name = node.target_name()
        if name is None or name not in self.variables:
            raise ValueError("separate_reasoning needs a gen before it (sgl.separate_reasoning(sgl.gen(...)))")
        reasoning, answer = node.split(self.variables[name])
        self._publish(name, answer, self.meta_info.get(name, {}))
        self._publish(name + "_reasoning_content", reasoning, {})

    def _run_Select(self, node: SglSelect) -> None:
        decision = self.backend.select(self, list(node.choices), node.temperature, node.choices_method)
        self.partial_values[node.name] = ""
        self._append(decision.decision, node.name)
        self._publish(node.name, decision.decision, decision.meta_info or {})

    def _run_RoleBegin(self, node: SglRoleBegin) -> None:
        prefix, _ = self.chat_template.get_prefix_and_suffix(node.role)
        if not self.messages_ and self.cur_role is None and node.role != "system":
            self._insert_default_system()
        self._append_constant(prefix)
        self.cur_role, self.cur_role_begin_pos = node.role, len(self.text_)

    def _run_RoleEnd(self, node: SglRoleEnd) -> None:
        _, suffix = self.chat_template.get_prefix_and_suffix(node.role)
        content = self.text_[self.cur_role_begin_pos :]
        self.messages_.append({"role": node.role, "content": content})
        self.cur_role = None
        self._append_constant(suffix)

    def _run_VarScopeBegin(self, node: SglVarScopeBegin) -> None:
        self.var_scope_begin[node.name] = len(self.text_)

    def _run_VarScopeEnd(self, node: SglVarScopeEnd) -> None:
        self._publish(node.name, self.text_[self.var_scope_begin.pop(node.name) :], {})

    def _run_CommitLazy(self, node: SglCommitLazy) -> None:
        if self.text_:
            self.backend.commit_lazy_operations(self)

    # Helpers
    def _insert_default_system(self) -> None:
        """The text a chat template adds when a conversation has no system turn."""
        template = self.chat_template
        if template.default_system_prompt is not None:
            self._run_RoleBegin(SglRoleBegin("system"))
            self._append(template.default_system_prompt)
            self._run_RoleEnd(SglRoleEnd("system"))
        elif template.preamble:
            self._append(template.preamble)

    def _register(self, name: Optional[str]) -> threading.Event:
        return self.variable_event.setdefault(name, threading.Event())

    def _append_constant(self, text: str) -> None:
        if self.speculation is not None:
            self.speculation.consume_constant(text)
        self._append(text)

    def _append(self, text: str, variable: Optional[str] = None) -> None:
        with self.changed:
            self.text_ += text
            if variable is not None:
                self.partial_values[variable] += text
            self.changed.notify_all()

    def _record_chunk(self, chunks: list, text: str, meta: dict) -> None:
        """Keep a streamed chunk with its meta info; a chunk without text (a token whose text is not
        complete yet) hands its per-chunk logprobs on to the next chunk."""
        carried = self.__dict__.pop("_carried_logprobs", None)
        if carried:
            meta = {**meta, **{k: carried[k] + list(meta.get(k) or []) for k in carried}}
        if not text:
            self._carried_logprobs = {k: list(meta[k]) for k in STREAMED_LOGPROB_KEYS if meta.get(k)}
            return
        with self.changed:
            chunks.append((text, meta))

    def _publish(self, name: Optional[str], value: Any, meta: dict) -> None:
        with self.changed:
            self.variables[name] = value
            self.meta_info[name] = meta
            self._register(name).set()
            self.changed.notify_all()

    def fail(self, error: BaseException) -> None:
        """Record the error that stops this program and wake every waiter."""
        with self.changed:
            self.error_ = error
            for event in self.variable_event.values():
                event.set()
            self.changed.notify_all()

    def _finish(self) -> None:
        with self.changed:
            self.finished = True
            for event in self.variable_event.values():
                event.set()
            self.changed.notify_all()
