"""Constrained decoding: regex, JSON Schema, choices and lark grammars as token masks.

Public API:
    from sgl_runtime.constrained import compile_constraint, ConstraintError
    c = compile_constraint(kind, spec, tokenizer, **options)  # "regex" | "json_schema" | "grammar" | "choices"
    c.accepts(text); m = c.matcher(); m.bitmask(); m.advance(token_id); m.is_accepting()
    m.forced_token_ids()
"""

from __future__ import annotations

from typing import Any

from sgl_runtime.constrained.errors import ConstraintError

__all__ = ["compile_constraint", "ConstraintError"]


def compile_constraint(kind: str, spec: Any, tokenizer: Any, **options: Any):
    """Compile `spec` of `kind` against `tokenizer` (a HF tokenizer or a path) into a Constraint."""
    from sgl_runtime.constrained.compiler import compile_constraint as _compile

    return _compile(kind, spec, tokenizer, **options)
