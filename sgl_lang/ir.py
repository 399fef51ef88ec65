"""The program IR: expression nodes built by the primitives; they hold data and no logic.

Nodes concatenate with `+` (and strings concatenate with nodes) into an `SglExprList`, which the
interpreter executes in order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Optional

from sgl_lang.choices import ChoicesSamplingMethod
from sgl_lang.sampling_params import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR, SglSamplingParams  # noqa: F401 (SGLang's sglang.lang.ir exports them)

_anonymous_ids = itertools.count()


def anonymous_name(kind: str) -> str:
    """A unique variable name for an unnamed gen/select."""
    return f"_{kind}_{next(_anonymous_ids)}"


class SglExpr:
    """Base of every node; `a + b` builds a list of nodes."""

    def __add__(self, other: Any) -> "SglExprList":
        return SglExprList([self, to_expr(other)])

    def __radd__(self, other: Any) -> "SglExprList":
        return SglExprList([to_expr(other), self])

    def flatten(self) -> list:
        return [self]


@dataclass(eq=False)
class SglExprList(SglExpr):
    exprs: list

    def flatten(self) -> list:
        return [node for expr in self.exprs for node in expr.flatten()]


@dataclass(eq=False)
class SglConstantText(SglExpr):
    value: str


@dataclass(eq=False)
class SglGen(SglExpr):
    name: Optional[str]
    sampling_params: SglSamplingParams = field(default_factory=SglSamplingParams)


@dataclass(eq=False)
class SglSelect(SglExpr):
    name: Optional[str]
    choices: list
    temperature: float
    choices_method: ChoicesSamplingMethod


@dataclass(eq=False)
class SglRoleBegin(SglExpr):
    role: str


@dataclass(eq=False)
class SglRoleEnd(SglExpr):
    role: str


@dataclass(eq=False)
class SglVarScopeBegin(SglExpr):
    name: str


@dataclass(eq=False)
class SglVarScopeEnd(SglExpr):
    name: str


@dataclass(eq=False)
class SglCommitLazy(SglExpr):
    """Send the text so far to the backend so its prefix is cached (fork, pre-caching)."""


def to_expr(value: Any) -> SglExpr:
    """Strings (and numbers) become constant text; nodes pass through."""
    if isinstance(value, SglExpr):
        return value
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return SglConstantText(str(value))
    raise TypeError(f"cannot add a {type(value).__name__} to a program; use a string or an sgl primitive")
