"""The grammar form's output: lark text whose terminals are placeholders for automata.

`SchemaGrammar(text, terminals, unique)` names each terminal's automaton (a ByteDFA, or a
CountedDFA for a long string) and the marked rules of unique arrays; `constraint(vocabulary)`
makes the GrammarConstraint that runs it, `accepts(text)` decides text without a vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sgl_runtime.constrained.errors import ConstraintError


def is_ambiguity_refusal(exc: ValueError) -> bool:
    """Whether a built grammar failed its check (SchemaGrammar.check): alternatives it cannot tell apart."""
    return "cannot tell the alternatives apart" in str(exc)


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
        """The GrammarConstraint over `vocabulary`. Lexer contexts and vocabulary walks are built
        as masks first reach them (warmup_s 0 unless given): a schema's grammar has a context per
        object shape, most of which one generation never visits."""
        from sgl_runtime.constrained.grammar.compiler import GrammarConstraint

        options.setdefault("warmup_s", 0.0)

        return GrammarConstraint(
            self.text,
            vocabulary,
            syntax="lark",
            terminal_dfas=self.terminals,
            default_reductions=True,
            unique_rules=self.unique,
            parser=self._engine.lark if self._engine is not None else self._lark(),  # built by `check`
            **options,
        )

    def check(self, kinds: list) -> None:
        """ConstraintError unless each parser state's terminals lex one way only
        (grammar/prefix_free.py): what the rules of several alternatives at one position (`kinds`:
        anyOf/oneOf over objects, value tests) need to stay exact. Terminals of one position that
        spell some of the same texts are first split into ones that do not (grammar/refine.py).
        LALR(1) conflicts are kept and followed (grammar/forking.py): a text that parses several
        ways is followed each way."""
        from sgl_runtime.constrained.grammar.prefix_free import overlapping_pairs, refuse_overlaps
        from sgl_runtime.constrained.grammar.refine import refine

        what = "/".join(sorted(set(kinds)))
        try:
            engine = self._new_engine()
            pairs = overlapping_pairs(engine.parser, self.terminals)
            refined = refine(self.text, self.terminals, pairs) if pairs else None
            if refined is not None:  # terminals that share texts, split into ones that do not (grammar/refine.py)
                self.text, self.terminals = refined
                engine = self._new_engine()
                pairs = overlapping_pairs(engine.parser, self.terminals)
            refuse_overlaps(pairs)
        except ConstraintError as exc:
            detail = str(exc)
            raise ConstraintError(
                f"{what}: the grammar form cannot tell the alternatives apart token by token "
                f"({detail.splitlines()[0][:200]})"
            ) from None
        self._engine = engine

    def engine(self):
        if self._engine is None:
            self._engine = self._new_engine()
        return self._engine

    def _new_engine(self):
        from sgl_runtime.constrained.grammar.engine import GrammarEngine

        return GrammarEngine(
            self._lark(), terminal_dfas=self.terminals, default_reductions=True, unique_rules=self.unique
        )

    def _lark(self):
        """The grammar's lark parser, its LALR(1) conflicts kept (grammar/forking.py)."""
        from sgl_runtime.constrained.grammar.source import build_lark

        return build_lark(self.text, placeholders=True, forking=True)

    def accepts(self, text: str) -> bool:
        """Whether `text` is in the language (no vocabulary needed)."""
        engine = self.engine()
        return any(engine.at_eof(s) for s in engine.feed_all(engine.initial, text.encode("utf-8")))
