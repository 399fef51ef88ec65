"""An LALR table that keeps its conflicts: where a state has several actions on one terminal.

lark's analyser resolves a shift/reduce conflict as shift (or refuses it, strict) and refuses a
reduce/reduce conflict. A grammar that unites the rules of several alternatives (a JSON Schema's
anyOf over objects that open with the same key) is not LALR(1), yet its language is still what
its rules derive. `ForkingLalrParser` (a lark `_plugins` entry, see source.build_lark) builds the
same LALR(1) states and lookaheads and records, per conflicted (state, terminal), every action;
the table's own entry is the first of them, so the contextual lexer sees the same terminals.
`LalrStacks` (parser.py) follows all of them, each as a stack of its own, so the recognizer
accepts exactly the grammar's language (the stacks of one text are GLR's, without sharing).
"""

from __future__ import annotations

from lark.parsers.lalr_analysis import IntParseTable, LALR_Analyzer, ParseTable, Reduce, Shift
from lark.parsers.lalr_parser import LALR_Parser, _Parser


def _rank(rule) -> tuple:
    """The order a conflict's reductions are kept in (the first is the table's own entry)."""
    return -(rule.options.priority or 0), rule.order, str(rule)


class _KeepingAnalyzer(LALR_Analyzer):
    """lark's LALR(1) analysis whose last step keeps every action of a conflict (`self.forks`)."""

    def compute_lalr1_states(self) -> None:
        table: dict = {}
        forks: dict = {}
        for itemset in self.lr0_itemsets:
            actions = {la.name: [(Shift, nxt.closure)] for la, nxt in itemset.transitions.items()}
            for la, rules in itemset.lookaheads.items():
                ordered = sorted(rules, key=_rank) if len(rules) > 1 else rules
                actions.setdefault(la.name, []).extend((Reduce, r) for r in ordered)
            table[itemset.closure] = {name: options[0] for name, options in actions.items()}
            conflicted = {name: tuple(options) for name, options in actions.items() if len(options) > 1}
            if conflicted:
                forks[itemset.closure] = conflicted
        ends = {}
        for state in table:
            for item in state:
                for start in self.lr0_start_states:
                    if item.rule.origin.name == "$root_" + start and item.is_satisfied:
                        ends[start] = state
        starts = {start: state.closure for start, state in self.lr0_start_states.items()}
        ints = IntParseTable.from_ParseTable(ParseTable(table, starts, ends))
        number = {state: i for i, state in enumerate(table)}  # from_ParseTable's numbering
        ints.forks = {
            number[state]: {
                name: tuple((kind, number[arg] if kind is Shift else arg) for kind, arg in options)
                for name, options in row.items()
            }
            for state, row in forks.items()
        }
        self.parse_table = ints


class ForkingLalrParser(LALR_Parser):
    """lark's LALR parser over `_KeepingAnalyzer`'s table. Its own `parse` follows the first action
    of a conflict only: the constraint engine (LalrStacks) reads the table, never lark's parse."""

    def __init__(self, parser_conf, debug: bool = False, strict: bool = False) -> None:
        analysis = _KeepingAnalyzer(parser_conf, debug=False, strict=False)
        analysis.compute_lalr()
        self._parse_table = analysis.parse_table
        self.parser_conf = parser_conf
        self.parser = _Parser(analysis.parse_table, parser_conf.callbacks, debug)
