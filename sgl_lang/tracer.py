"""Tracing: run a program body without a model to find its constant prefix.

The body runs on a real interpreter whose backend stops at the first model call; arguments not
given are placeholders, and the prefix ends where a placeholder or a model call first appears.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

from sgl_lang.backend.base import BaseBackend
from sgl_lang.chat_template import ChatTemplate
from sgl_lang.interpreter import StreamExecutor
from sgl_lang.sampling_params import DEFAULT_SAMPLING

_MARK = "\x00"


class _Placeholder(str):
    """Stands for an argument the trace was not given."""


class _StopTrace(Exception):
    """The traced program reached its first model call."""


@dataclass
class TracedProgram:
    prefix: str  # constant text every run of the program starts with (roles rendered)
    model_calls: list = field(default_factory=list)  # kinds of the calls seen ("gen", "select")


class _TracingBackend(BaseBackend):
    def __init__(self, template: ChatTemplate):
        self.template = template
        self.calls: list = []

    def get_chat_template(self) -> ChatTemplate:
        return self.template

    def generate(self, s, sampling_params):
        self.calls.append("gen")
        raise _StopTrace

    def generate_stream(self, s, sampling_params):
        return self.generate(s, sampling_params)

    def select(self, s, choices, temperature, choices_method):
        self.calls.append("select")
        raise _StopTrace


def trace_program(func: Callable, template: ChatTemplate, args: tuple, kwargs: dict) -> TracedProgram:
    """Run `func` far enough to know its constant prefix."""
    from sgl_lang.program_state import ProgramState  # program_state imports the interpreter

    params = list(inspect.signature(func).parameters.values())[1 + len(args) :]
    placeholders = {
        p.name: _Placeholder(f"{_MARK}{p.name}{_MARK}")
        for p in params
        if p.name not in kwargs and p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    backend = _TracingBackend(template)
    executor = StreamExecutor(backend, DEFAULT_SAMPLING)
    try:
        func(ProgramState(executor), *args, **{**placeholders, **kwargs})
    except Exception:  # the body used a placeholder or a missing variable: the prefix ends there
        pass
    executor.end()
    return TracedProgram(prefix=executor.text_.split(_MARK, 1)[0], model_calls=backend.calls)
