"""`sgl.separate_reasoning(expr, model_type)`: after a gen, split its value into the answer (kept
under the gen's name) and the reasoning (under NAME + "_reasoning_content"), as SGLang does.

Model types: "qwen3" (reasoning when the value starts with <think>) and "deepseek-r1" (the
value starts inside the reasoning, which ends at </think>). Pure text, no runtime imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sgl_lang.ir import SglExpr, SglExprList, SglGen

MODEL_TYPES = {"qwen3": False, "deepseek-r1": True}  # model type -> starts inside the reasoning


@dataclass(eq=False)
class SglSeparateReasoning(SglExpr):
    model_type: str
    expr: Optional[SglExpr] = None

    def target_name(self) -> Optional[str]:
        gens = [n for n in (self.expr.flatten() if self.expr is not None else []) if isinstance(n, SglGen)]
        return gens[-1].name if gens else None

    def split(self, value: str) -> tuple[str, str]:
        """(reasoning, answer) of a gen's value."""
        return split_think(value, MODEL_TYPES[self.model_type])


def separate_reasoning(expr: Optional[SglExpr] = None, model_type: Optional[str] = None) -> Any:
    """`expr` (a gen) followed by splitting its value into answer and reasoning_content."""
    model_type = model_type or "deepseek-r1"
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown model_type {model_type!r}; expected one of {', '.join(MODEL_TYPES)}")
    node = SglSeparateReasoning(model_type, expr)
    return SglExprList([expr, node]) if expr is not None else node


def split_think(text: str, open_at_start: bool, start: str = "<think>", end: str = "</think>") -> tuple[str, str]:
    stripped = text.lstrip()
    if stripped.startswith(start):
        text, open_at_start = stripped[len(start) :], True
    if not open_at_start:
        return "", text
    k = text.find(end)
    if k < 0:
        return text.strip("\n"), ""
    return text[:k].strip("\n"), text[k + len(end) :].lstrip("\n")
