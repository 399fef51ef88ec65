"""Turns a grammar spec (a shipped grammar's name, lark text or GBNF text) into a lark LALR parser.

Shipped grammars live in the repository's `grammars/` folder (`NAME.lark`, and `NAME.gbnf` for
the same language in GBNF), reached from the package through the `sgl_runtime/grammars` symlink
(installed as package data). The syntax is `syntax` when given ("lark" | "gbnf"), else detected:
GBNF when the first rule reads `name ::= ...`. GBNF is lowered to an exact character-level lark
grammar (gbnf_lower). Every failure becomes a `ConstraintError` carrying the reason.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Optional

import lark
from lark.exceptions import LarkError
from lark.grammar import NonTerminal, Rule, RuleOptions, Terminal
from lark.lexer import PatternStr, TerminalDef
from lark.load_grammar import Grammar

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.forking import ForkingLalrParser
from sgl_runtime.constrained.grammar.gbnf_build import build_gbnf_parser
from sgl_runtime.constrained.grammar.gbnf_syntax import looks_like_gbnf

GRAMMAR_DIR = Path(__file__).resolve().parents[2] / "grammars"
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_RULE, _TERMINAL = re.compile(r"^[a-z][a-z0-9_]*$"), re.compile(r"^[A-Z][A-Z0-9_]*$")
SYNTAXES = ("lark", "gbnf")


def shipped_grammar_names() -> list[str]:
    """Names usable as `compile_grammar(name, ...)` (the grammars/*.lark files)."""
    return sorted(p.stem for p in GRAMMAR_DIR.glob("*.lark"))


def shipped_gbnf_names() -> list[str]:
    """Names of the shipped grammars that also come in GBNF (the grammars/*.gbnf files)."""
    return sorted(p.stem for p in GRAMMAR_DIR.glob("*.gbnf"))


def grammar_text(spec: str, syntax: Optional[str] = None) -> str:
    """The grammar text for `spec` (see resolve_grammar)."""
    return resolve_grammar(spec, syntax)[0]


def resolve_grammar(spec: str, syntax: Optional[str] = None) -> tuple[str, str]:
    """(text, syntax) for `spec`: a shipped grammar's name (`json`, `json.gbnf`) or grammar text."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConstraintError("grammar must be a non-empty string (a shipped grammar name, lark or GBNF text)")
    if syntax is not None and syntax not in SYNTAXES:
        raise ConstraintError(f"grammar syntax must be one of {', '.join(SYNTAXES)}, got {syntax!r}")
    name, ext = spec.strip(), None
    for suffix in SYNTAXES:
        if name.endswith("." + suffix):
            name, ext = name[: -len(suffix) - 1], suffix
    if ext is not None and syntax is not None and ext != syntax:
        raise ConstraintError(f"grammar {spec.strip()!r} is a .{ext} file but the syntax asked for is {syntax}")
    if _NAME.match(name):
        chosen = ext or syntax or "lark"
        path = GRAMMAR_DIR / f"{name}.{chosen}"
        if path.is_file():
            return path.read_text(encoding="utf-8"), chosen
        if ":" not in spec:
            raise ConstraintError(
                f"unknown grammar {name!r}: shipped grammars are {shipped_grammar_names()} "
                f"(GBNF: {shipped_gbnf_names()}), or pass lark or GBNF grammar text"
            )
    return spec, syntax or ("gbnf" if looks_like_gbnf(spec) else "lark")


def build_parser(
    spec: str, syntax: Optional[str] = None, start: str = "start", placeholders: bool = False
) -> lark.Lark:
    """The LALR parser for `spec` (see grammar_text); GBNF is lowered to character-level lark.
    placeholders: see build_lark."""
    text, syntax = resolve_grammar(spec, syntax)
    if syntax == "lark":
        return build_lark(text, start, placeholders)
    if start != "start":
        raise ConstraintError("the start option is for lark grammars; a GBNF grammar starts at its root rule")
    return build_gbnf_parser(text)


def build_lark(
    text: str, start: str = "start", placeholders: bool = False, strict: bool = False, forking: bool = False
) -> lark.Lark:
    """An LALR parser with lark's contextual lexer (the reference every mask is exact against).
    placeholders: every terminal stands for an automaton given to the engine (a JSON Schema's
    grammar form), so lark's own checks of terminal regexes (their overlaps, found with
    interegular per lexer context) are skipped; the engine checks what it runs. strict: an LALR(1)
    conflict is an error (lark otherwise resolves shift/reduce conflicts as shift). forking: every
    action of a conflict is kept for the engine to follow (grammar/forking.py; no conflict refused)."""
    plugins: dict = {"ContextualLexer": _PlaceholderLexer} if placeholders else {}
    if forking:
        plugins["LALR_Parser"] = ForkingLalrParser
    grammar = (placeholder_grammar(text) if placeholders else None) or text
    try:
        parser = lark.Lark(grammar, parser="lalr", lexer="contextual", start=start, strict=strict, _plugins=plugins)
    except LarkError as exc:
        raise ConstraintError(f"invalid lark grammar: {exc}") from None
    except (ValueError, KeyError, AssertionError, RecursionError) as exc:
        raise ConstraintError(f"invalid lark grammar: {type(exc).__name__}: {exc}") from None
    undefined = [t.name for t in parser.terminals if t.pattern is None]
    if undefined:
        raise ConstraintError(f"unsupported lark grammar: terminals without a pattern {undefined}")
    return parser


def placeholder_grammar(text: str) -> Optional[Grammar]:
    """`text` as lark's grammar object when it is plain BNF over placeholder terminals (`rule: a B |
    C`, `B: "<B>"`: what a JSON Schema's grammar form writes), else None. Reading such text is
    trivial, while lark's grammar parser and its rule compiler (EBNF to BNF, tree transforms)
    take tens of milliseconds on a large schema's rules (tests check that both give the same
    rules, terminals and parse table)."""
    rules: list = []
    terminals: list = []
    for line in text.splitlines():
        name, sep, body = line.partition(": ")
        if not line or not sep or not (_RULE.match(name) or _TERMINAL.match(name)):
            return None
        if _TERMINAL.match(name):
            if body != f'"<{name}>"':
                return None
            terminals.append(name)
            continue
        alternatives = []
        for alternative in body.split("|"):
            symbols = alternative.split()
            if not all(_RULE.match(x) or _TERMINAL.match(x) for x in symbols):
                return None
            alternatives.append(symbols)
        rules.append((name, alternatives))
    return _PlainGrammar(rules, terminals)


class _PlainGrammar(Grammar):
    """Plain BNF over placeholder terminals, compiled straight into lark's rules and terminal
    definitions: what `Grammar.compile` makes of the same text (a rule's repeated alternatives
    kept once, unused rules and terminals dropped, as it does), without its tree transforms."""

    def __init__(self, rules: list, terminals: list) -> None:
        super().__init__([], [], [])
        self.plain_rules, self.plain_terminals = rules, terminals

    def compile(self, start, terminals_to_keep) -> tuple:
        terminals = [TerminalDef(n, PatternStr(f"<{n}>", raw=f'"<{n}>"')) for n in self.plain_terminals]
        symbols: dict = {}

        def symbol(x: str):
            found = symbols.get(x)
            if found is None:
                found = symbols[x] = Terminal(x) if _TERMINAL.match(x) else NonTerminal(x)
            return found

        compiled = []
        for name, alternatives in self.plain_rules:
            origin, options = NonTerminal(name), RuleOptions()
            unique = dict.fromkeys(tuple(alternative) for alternative in alternatives)  # lark drops repeats
            for order, alternative in enumerate(unique):
                compiled.append(Rule(origin, [symbol(x) for x in alternative], order, None, options))
        while True:  # unused rules go, as in Grammar.compile
            used = {x for r in compiled for x in r.expansion if isinstance(x, NonTerminal) and x != r.origin}
            used |= {NonTerminal(x) for x in start}
            kept = [r for r in compiled if r.origin in used]
            if len(kept) == len(compiled):
                break
            compiled = kept
        if terminals_to_keep != "*":
            named = {x.name for r in compiled for x in r.expansion if isinstance(x, Terminal)}
            terminals = [t for t in terminals if t.name in named or t.name in terminals_to_keep]
        return terminals, compiled, []


class _PlaceholderLexer(lark.lexer.ContextualLexer):
    """lark's contextual lexer without its terminal checks (build_lark's `placeholders`)."""

    def __init__(self, conf, states, always_accept=()) -> None:
        conf = copy.copy(conf)
        conf.skip_validation = True
        super().__init__(conf, states, always_accept)
