"""The grammar form's output: lark text whose terminals are placeholders for automata.

`SchemaGrammar(text, terminals, unique)` names each terminal's automaton (a ByteDFA, or a
CountedDFA for a long string) and the marked rules of unique arrays; `constraint(vocabulary)`
makes the GrammarConstraint that runs it, `accepts(text)` decides text without a vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SchemaGrammar:
    """A lark grammar whose terminals are placeholders for the automata in `terminals`."""

    text: str
    terminals: dict
    unique: dict = field(default_factory=dict)  # the marked rules of unique arrays (GrammarEngine)
    _engine: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {"text": self.text, "terminals": self.terminals, "unique": self.unique, "_engine": None}

    def constraint(self, vocabulary, **options):
        from sgl_runtime.constrained.grammar.compiler import GrammarConstraint

        return GrammarConstraint(
            self.text,
            vocabulary,
            syntax="lark",
            terminal_dfas=self.terminals,
            default_reductions=True,
            unique_rules=self.unique,
            **options,
        )

    def engine(self):
        if self._engine is None:
            from sgl_runtime.constrained.grammar.engine import GrammarEngine
            from sgl_runtime.constrained.grammar.source import build_lark

            self._engine = GrammarEngine(
                build_lark(self.text, placeholders=True),
                terminal_dfas=self.terminals,
                default_reductions=True,
                unique_rules=self.unique,
            )
        return self._engine

    def accepts(self, text: str) -> bool:
        """Whether `text` is in the language (no vocabulary needed)."""
        engine = self.engine()
        state = engine.feed(engine.initial, text.encode("utf-8"))
        return state is not None and engine.at_eof(state)
