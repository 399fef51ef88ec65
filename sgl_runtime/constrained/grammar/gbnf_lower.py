"""Lowers a GBNF grammar to an equivalent character-level lark grammar for the grammar engine.

GBNF has no lexer: its language is over characters. The translation keeps it so, exactly:
- the code points the grammar mentions are split into *cells*, the coarsest partition in which
  every character class and literal character is a union of cells; each cell is one lark
  terminal matching one character. Cells are disjoint, so lark's contextual lexer turns any
  text into exactly one terminal sequence (its characters), and the parser alone decides;
- rules that are not recursive are inlined; each remaining rule (and `root`) becomes a minimal
  DFA over cells and recursive rule names (interegular's FSM algebra), written out as
  left-linear lark rules (state q: `q -> p symbol`), so regular parts are deterministic;
- rules that derive no string are removed (the engine's masks rely on every parser prefix
  being completable, which holds for a reduced grammar);
- lark builds the LALR(1) table in strict mode: a grammar that is ambiguous or needs more than
  one character of lookahead is refused with a ConstraintError naming the rules, never
  resolved silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from interegular.fsm import FSM, Alphabet, TransitionKey, epsilon, null

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.gbnf_cells import cell_regex, cells_of, no_surrogates
from sgl_runtime.constrained.grammar.gbnf_syntax import (
    Alt,
    Chars,
    GbnfGrammar,
    Node,
    Repeat,
    Seq,
    refs_of,
)

MAX_RULE_STATES = 20_000  # DFA states over all rules (each becomes a lark rule)


@dataclass(frozen=True)
class LoweredGrammar:
    lark_text: str
    rule_names: dict  # lark rule prefix -> GBNF rule name (for error messages)
    lexemes: dict  # lark terminal name -> GBNF rule name, for rules lowered to one terminal


def lexeme_candidates(grammar: GbnfGrammar) -> list[str]:
    """Rules that may become one lark terminal: not recursive, not `root`, never empty."""
    reachable = _reachable(grammar)
    recursive = _recursive(grammar, reachable)
    return sorted(
        n
        for n in reachable - {"root"}
        if not (_reachable_from(grammar, n) & recursive) and not _nullable(grammar, grammar.rules[n])
    )


def lower_gbnf(
    grammar: GbnfGrammar, lexemes: frozenset = frozenset(), inline: bool = False, right: bool = False
) -> LoweredGrammar:
    """The lark grammar (start rule `start`) whose language is exactly `grammar`'s: every rule
    its own nonterminal except the `lexemes` (from lexeme_candidates), each one lark terminal
    matching the rule's regular language (exact only where gbnf_build.unsafe_lexemes agrees);
    with `inline`, only recursive rules stay nonterminals (bigger, but more often LALR(1)); with
    `right`, DFAs are written right-linear (`p: SYM q`), which defers every reduction to a rule's
    end, so alternatives of different rules sharing a prefix need no early decision (but parser
    stacks grow with the text of the rules being read)."""
    reachable = _reachable(grammar)
    kept_set = _recursive(grammar, reachable) if inline else reachable - set(lexemes)
    kept = ["root"] + sorted(n for n in kept_set if n != "root")
    cells, cell_of_set = cells_of(grammar, reachable - set(lexemes))
    lexeme_names = {n: f"L{i}" for i, n in enumerate(sorted(lexemes))}
    symbols = (
        [("cell", i) for i in range(len(cells))] + [("rule", n) for n in kept] + [("lex", n) for n in lexeme_names]
    )
    alphabet = Alphabet({s: TransitionKey(i) for i, s in enumerate(symbols)})
    builder = _FsmBuilder(grammar, set(kept), alphabet, cell_of_set)
    fsms = _drop_unproductive({name: _Dfa.of(builder.rule(name)) for name in kept})
    if "root" not in fsms:
        raise ConstraintError("GBNF grammar matches no string at all (root derives nothing)")
    prefixes = {name: ("start" if name == "root" else f"rule_{i}") for i, name in enumerate(kept)}
    lines, total = [], 0
    for name, fsm in fsms.items():
        rule_lines, states = (_right_linear if right else _left_linear)(prefixes[name], fsm, prefixes, lexeme_names)
        total += states
        if total > MAX_RULE_STATES:
            raise ConstraintError(
                f"GBNF grammar too large: its rules need more than {MAX_RULE_STATES} automaton states"
            )
        lines += rule_lines
    for i, cell in enumerate(cells):
        lines.append(f"C{i}: /{cell_regex(cell)}/")
    for name, terminal in lexeme_names.items():
        lines.append(f"{terminal}: /{_regex(grammar, grammar.rules[name])}/")
    return LoweredGrammar(
        "\n".join(lines) + "\n", {p: n for n, p in prefixes.items()}, {t: n for n, t in lexeme_names.items()}
    )


def explain_conflict(message: str, lowered: LoweredGrammar) -> str:
    """lark's strict-mode conflict report with the lark rule names turned back into GBNF names."""

    def name(match: re.Match) -> str:
        return repr(lowered.rule_names.get(match.group(1), match.group(1)))

    first = re.sub(r"Terminal\('C\d+'\)", "a character", " ".join(message.split()))
    rule = r"\b(start|rule_\d+)(?:_\d+)?\b"
    rules = sorted({name(m) for m in re.finditer(rule, message)})
    first = re.sub(rule, name, first)
    return (
        f"GBNF grammar is ambiguous or needs more than one character of lookahead "
        f"(not LALR(1) at the character level) in rule(s) {', '.join(rules) or '?'}: "
        f"{first}"
    )


# ---- private: rules -----------------------------------------------------------------------------


def _reachable(grammar: GbnfGrammar) -> set[str]:
    seen, todo = {"root"}, ["root"]
    while todo:
        for ref in refs_of(grammar.rules[todo.pop()]):
            if ref not in seen:
                seen.add(ref)
                todo.append(ref)
    return seen


def _reachable_from(grammar: GbnfGrammar, name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for ref in refs_of(grammar.rules[todo.pop()]):
            if ref not in seen:
                seen.add(ref)
                todo.append(ref)
    return seen


def _nullable(grammar: GbnfGrammar, node: Node) -> bool:
    """Whether a non-recursive `node` matches the empty string."""
    if isinstance(node, Chars):
        return False
    if isinstance(node, Seq):
        return all(_nullable(grammar, i) for i in node.items)
    if isinstance(node, Alt):
        return any(_nullable(grammar, o) for o in node.options)
    if isinstance(node, Repeat):
        return node.low == 0 or _nullable(grammar, node.body)
    return _nullable(grammar, grammar.rules[node.name])


def _regex(grammar: GbnfGrammar, node: Node) -> str:
    """A regex (in lark's /.../ spelling) for a non-recursive node."""
    if isinstance(node, Chars):
        return cell_regex(no_surrogates(node.ranges))
    if isinstance(node, Seq):
        return "".join(_regex(grammar, i) for i in node.items) if node.items else "(?:)"
    if isinstance(node, Alt):
        return "(?:" + "|".join(_regex(grammar, o) for o in node.options) + ")"
    if isinstance(node, Repeat):
        high = "" if node.high is None else str(node.high)
        bound = f"{{{node.low}}}" if node.high == node.low else f"{{{node.low},{high}}}"
        return f"(?:{_regex(grammar, node.body)}){bound}"
    return f"(?:{_regex(grammar, grammar.rules[node.name])})"


def _recursive(grammar: GbnfGrammar, names: set[str]) -> set[str]:
    """Rules that can reach themselves through references (they cannot be inlined)."""
    edges = {n: refs_of(grammar.rules[n]) for n in names}
    out = set()
    for start in names:
        seen, todo = set(), list(edges[start])
        while todo:
            n = todo.pop()
            if n == start:
                out.add(start)
                break
            if n not in seen:
                seen.add(n)
                todo.extend(edges[n])
    return out


class _FsmBuilder:
    """Minimal DFAs of rule bodies over cells and kept (recursive) rule names."""

    def __init__(self, grammar: GbnfGrammar, kept: set[str], alphabet: Alphabet, cell_of_set: dict) -> None:
        self.grammar, self.kept, self.alphabet, self.cell_of_set = grammar, kept, alphabet, cell_of_set
        self._inlined: dict = {}

    def rule(self, name: str) -> FSM:
        return self.node(self.grammar.rules[name])

    def node(self, node: Node) -> FSM:
        if isinstance(node, Chars):
            keys = [self.alphabet[("cell", c)] for c in self.cell_of_set[no_surrogates(node.ranges)]]
            return self._symbols(keys)
        if isinstance(node, Seq):
            return (
                FSM.concatenate(*[self.node(i) for i in node.items]).reduce() if node.items else epsilon(self.alphabet)
            )
        if isinstance(node, Alt):
            return FSM.union(*[self.node(o) for o in node.options]).reduce()
        if isinstance(node, Repeat):
            return self._repeat(self.node(node.body), node.low, node.high)
        if node.name in self.kept:
            return self._symbols([self.alphabet[("rule", node.name)]])
        if ("lex", node.name) in self.alphabet:
            return self._symbols([self.alphabet[("lex", node.name)]])
        if node.name not in self._inlined:
            self._inlined[node.name] = self.rule(node.name)
        return self._inlined[node.name]

    def _symbols(self, keys: list) -> FSM:
        if not keys:
            return null(self.alphabet)
        return FSM(self.alphabet, {0, 1}, 0, {1}, {0: {k: 1 for k in keys}, 1: {}})

    def _repeat(self, body: FSM, low: int, high) -> FSM:
        head = body.times(low).reduce() if low else epsilon(self.alphabet)
        if high is None:
            return (head + body.star()).reduce()
        tail = epsilon(self.alphabet)
        for _ in range(high - low):
            tail = ((body + tail) | epsilon(self.alphabet)).reduce()
        return (head + tail).reduce()


@dataclass
class _Dfa:
    """A rule's automaton with transitions on symbols (("cell", id) or ("rule", name))."""

    initial: int
    finals: set
    trans: dict  # state -> {symbol: state}

    @staticmethod
    def of(fsm: FSM) -> _Dfa:
        symbols = fsm.alphabet.by_transition
        trans = {s: {sym: t for k, t in fsm.map.get(s, {}).items() for sym in symbols[k]} for s in fsm.states}
        return _Dfa(fsm.initial, set(fsm.finals), trans)

    def live(self, productive: set) -> set:
        """States on a path from the initial state to a final one over terminals and `productive` rules."""
        edges = [
            (s, t)
            for s, row in self.trans.items()
            for sym, t in row.items()
            if sym[0] != "rule" or sym[1] in productive
        ]
        forward, todo = {self.initial}, [self.initial]
        while todo:
            s = todo.pop()
            for a, b in edges:
                if a == s and b not in forward:
                    forward.add(b)
                    todo.append(b)
        backward = self.finals & forward
        todo = list(backward)
        while todo:
            s = todo.pop()
            for a, b in edges:
                if b == s and a in forward and a not in backward:
                    backward.add(a)
                    todo.append(a)
        return backward if self.initial in backward else set()

    def with_fresh_initial(self) -> _Dfa:
        """The same automaton with a new initial state that no transition enters."""
        fresh = max(self.trans) + 1
        trans = {s: dict(row) for s, row in self.trans.items()}
        trans[fresh] = dict(self.trans[self.initial])
        finals = self.finals | ({fresh} if self.initial in self.finals else set())
        return _Dfa(fresh, finals, trans)


def _drop_unproductive(dfas: dict) -> dict:
    """Rules that derive some string, with transitions on the others and dead states removed."""
    productive: set = set()
    changed = True
    while changed:
        changed = False
        for name, dfa in dfas.items():
            if name not in productive and dfa.live(productive):
                productive.add(name)
                changed = True
    out = {}
    for name, dfa in dfas.items():
        if name not in productive:
            continue
        live = dfa.live(productive)
        trans = {
            s: {sym: t for sym, t in row.items() if t in live and (sym[0] != "rule" or sym[1] in productive)}
            for s, row in dfa.trans.items()
            if s in live
        }
        out[name] = _Dfa(dfa.initial, dfa.finals & live, trans)
    return out


def _left_linear(prefix: str, dfa: _Dfa, prefixes: dict, lexemes: dict) -> tuple[list[str], int]:
    """Lark rules for `dfa`: one nonterminal per non-initial state (`q: p SYM | SYM`)."""
    if any(t == dfa.initial for row in dfa.trans.values() for t in row.values()):
        dfa = dfa.with_fresh_initial()
    order = {s: i for i, s in enumerate(sorted(set(dfa.trans) - {dfa.initial}))}
    incoming: dict = {s: [] for s in order}
    for p, row in dfa.trans.items():
        for sym, q in row.items():
            name = f"C{sym[1]}" if sym[0] == "cell" else (prefixes if sym[0] == "rule" else lexemes)[sym[1]]
            incoming[q].append(name if p == dfa.initial else f"{prefix}_{order[p]} {name}")
    lines = [f"{prefix}_{i}: {' | '.join(sorted(incoming[s]))}" for s, i in order.items()]
    alts = [f"{prefix}_{order[f]}" for f in sorted(dfa.finals - {dfa.initial})]
    if dfa.initial in dfa.finals:
        alts.append("")
    lines.insert(0, f"{prefix}: {' | '.join(alts)}")
    return lines, len(order)


def _right_linear(prefix: str, dfa: _Dfa, prefixes: dict, lexemes: dict) -> tuple[list[str], int]:
    """Lark rules for `dfa`: one nonterminal per state (`p: SYM q | SYM | ` (empty if final))."""
    order = {s: i for i, s in enumerate(sorted(dfa.trans))}
    lines = [f"{prefix}: {prefix}_{order[dfa.initial]}"]
    for p, i in order.items():
        alts = []
        for sym, q in dfa.trans[p].items():
            name = f"C{sym[1]}" if sym[0] == "cell" else (prefixes if sym[0] == "rule" else lexemes)[sym[1]]
            alts.append(name if (q in dfa.finals and not dfa.trans[q]) else f"{name} {prefix}_{order[q]}")
        if p in dfa.finals:
            alts.append("")
        lines.append(f"{prefix}_{i}: {' | '.join(sorted(alts))}")
    return lines, len(order)
