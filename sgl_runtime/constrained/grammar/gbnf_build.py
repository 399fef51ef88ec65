"""Builds the lark LALR parser for GBNF text: regular rules as lexer terminals where exact.

A character-level grammar is always exact but makes every vocabulary token close one terminal
per character, which is slow to mask. So regular, never-empty rules (`string`, `number`) are
first tried as single lark terminals (*lexemes*). lark's contextual lexer then decides where a
lexeme ends (longest match) and which terminal starts (first in order), which equals the GBNF
meaning when, checked on the built parser:
- in every parser state, the terminals it accepts have pairwise disjoint first bytes (the next
  byte names the only terminal that can start there), and
- no byte that extends a complete match of a lexeme can follow that lexeme in the grammar
  (FOLLOW), so the longest match is the only match any parse can use, and
- Python's `re` (lark's lexer) takes that longest match too (the engine's terminal check).
Lexemes that break a condition are lowered to characters again, down to the all-character
grammar; if that is not LALR(1), the same written right-linear (alternatives of different rules
that share a prefix, e.g. `identifier` and `funcCall ::= identifier "(" ...`, need that), and
last with non-recursive rules inlined into one minimal DFA per recursive rule (e.g. `num "9"`
with `num ::= [0-9]+` needs that).
"""

from __future__ import annotations

import lark
import numpy as np
from lark.exceptions import GrammarError, LarkError
from lark.parsers.grammar_analysis import calculate_sets

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.gbnf_lower import (
    LoweredGrammar,
    explain_conflict,
    lexeme_candidates,
    lower_gbnf,
)
from sgl_runtime.constrained.grammar.gbnf_syntax import parse_gbnf
from sgl_runtime.constrained.grammar.slots import terminal_dfa

MAX_ATTEMPTS = 4


def build_gbnf_parser(text: str) -> lark.Lark:
    """The parser for GBNF `text` (ConstraintError if invalid, ambiguous or not LALR(1))."""
    grammar = parse_gbnf(text)
    lexemes = frozenset(lexeme_candidates(grammar))
    for _ in range(MAX_ATTEMPTS):
        lowered = lower_gbnf(grammar, lexemes)
        try:
            parser = _lark(lowered)
        except ConstraintError:
            if not lexemes:
                break
            lexemes = frozenset()  # lexemes can make a grammar non-LALR(1): try characters
            continue
        unsafe = unsafe_lexemes(parser, lowered)
        if not unsafe:
            return parser
        lexemes = lexemes - unsafe
    first_error = None
    for options in ({}, {"right": True}, {"inline": True}):
        try:
            return _lark(lower_gbnf(grammar, **options))
        except ConstraintError as exc:
            first_error = first_error or exc
    raise first_error


def unsafe_lexemes(parser: lark.Lark, lowered: LoweredGrammar) -> frozenset:
    """GBNF names of the lexemes for which lark's lexing could differ from the GBNF meaning."""
    if not lowered.lexemes:
        return frozenset()
    cache: dict = {}
    first, unsafe = {}, set()
    for terminal in parser.terminals:
        try:
            first[terminal.name] = _first_bytes(terminal_dfa(terminal, cache))
        except ConstraintError:  # e.g. Python's re would stop at an earlier alternative
            if terminal.name not in lowered.lexemes:
                raise
            unsafe.add(terminal.name)
    if unsafe:
        return frozenset(lowered.lexemes[n] for n in unsafe)
    for row in parser.parser.parser.parser.parse_table.states.values():
        names = [n for n in row if n in first]
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if (a in lowered.lexemes or b in lowered.lexemes) and (first[a] & first[b]).any():
                    unsafe.update(n for n in (a, b) if n in lowered.lexemes)
    follow = _terminal_follow(parser)
    for name in lowered.lexemes.keys() & first.keys():  # a lexeme used only inside others is unused
        dfa = terminal_dfa(parser.get_terminal(name), cache)
        extend = np.zeros(256, dtype=bool)
        for s in np.flatnonzero(dfa.accepting):
            extend |= dfa.transitions[s] >= 0
        for after in follow.get(name, ()):
            if (extend & first[after]).any():
                unsafe.add(name)
    return frozenset(lowered.lexemes[n] for n in unsafe)


# ---- private ------------------------------------------------------------------------------------


def _lark(lowered: LoweredGrammar) -> lark.Lark:
    try:
        return lark.Lark(lowered.lark_text, parser="lalr", lexer="contextual", start="start", strict=True)
    except GrammarError as exc:
        raise ConstraintError(explain_conflict(str(exc), lowered)) from None
    except (LarkError, ValueError, KeyError, AssertionError, RecursionError) as exc:
        raise ConstraintError(f"GBNF grammar cannot be compiled: {type(exc).__name__}: {exc}") from None


def _first_bytes(dfa) -> np.ndarray:
    return dfa.transitions[dfa.initial] >= 0  # bool [256]


def _terminal_follow(parser: lark.Lark) -> dict:
    """Terminal name -> names of the terminals that can come right after it."""
    rules = parser.rules
    first, follow, nullable = calculate_sets(rules)
    out: dict = {}
    for rule in rules:
        expansion = rule.expansion
        for i, sym in enumerate(expansion):
            if not sym.is_term:
                continue
            after = out.setdefault(sym.name, set())
            for nxt in expansion[i + 1 :]:
                after.update(t.name for t in (first[nxt] if not nxt.is_term else {nxt}))
                if nxt not in nullable:
                    break
            else:
                after.update(t.name for t in follow[rule.origin])
    return {k: {n for n in v if n != "$END"} for k, v in out.items()}
