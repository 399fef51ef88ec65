"""Turns a grammar spec (a shipped grammar's name or inline lark text) into a lark LALR parser.

Shipped grammars live in the repository's `grammars/` folder, reached from the package through
the `sgl_runtime/grammars` symlink (installed as package data). Every lark failure becomes a
`ConstraintError` carrying lark's own message.
"""

from __future__ import annotations

import re
from pathlib import Path

import lark
from lark.exceptions import LarkError

from sgl_runtime.constrained.errors import ConstraintError

GRAMMAR_DIR = Path(__file__).resolve().parents[2] / "grammars"
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


def shipped_grammar_names() -> list[str]:
    """Names usable as `compile_grammar(name, ...)` (the grammars/*.lark files)."""
    return sorted(p.stem for p in GRAMMAR_DIR.glob("*.lark"))


def grammar_text(spec: str) -> str:
    """The lark text for `spec`: a shipped grammar's name, or lark grammar text itself."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConstraintError("grammar must be a non-empty string (a shipped grammar name or lark text)")
    name = spec.strip()
    if name.endswith(".lark"):
        name = name[: -len(".lark")]
    if _NAME.match(name):
        path = GRAMMAR_DIR / f"{name}.lark"
        if path.is_file():
            return path.read_text(encoding="utf-8")
        if ":" not in spec:
            raise ConstraintError(
                f"unknown grammar {name!r}: shipped grammars are {shipped_grammar_names()}, "
                "or pass lark grammar text")
    return spec


def build_lark(text: str, start: str = "start") -> lark.Lark:
    """An LALR parser with lark's contextual lexer (the reference every mask is exact against)."""
    try:
        parser = lark.Lark(text, parser="lalr", lexer="contextual", start=start)
    except LarkError as exc:
        raise ConstraintError(f"invalid lark grammar: {exc}") from None
    except (ValueError, KeyError, AssertionError, RecursionError) as exc:
        raise ConstraintError(f"invalid lark grammar: {type(exc).__name__}: {exc}") from None
    undefined = [t.name for t in parser.terminals if t.pattern is None]
    if undefined:
        raise ConstraintError(f"unsupported lark grammar: terminals without a pattern {undefined}")
    return parser
