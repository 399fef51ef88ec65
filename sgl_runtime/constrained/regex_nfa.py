"""A parsed Python regex as an epsilon-NFA whose assertions are guarded epsilon edges.

Every construct is built exactly or refused with a `ConstraintError` naming it:
- characters, classes, alternation, groups, greedy and lazy quantifiers, scoped and global
  flags `i`, `m`, `s`, `x`, `a` (lazy and greedy repeats accept the same strings under
  fullmatch: backtracking tries every split);
- `^ $ \\A \\Z \\b \\B` and lookahead / lookbehind with assertion-free bodies (a lookahead may
  start with `^`/`\\A` and end with `$`/`\\Z`, a lookbehind start with `^`/`\\A`) become guards: an
  epsilon edge taken only when the text before the position is in a prefix language and the
  text after it in a suffix language (`regex_automaton` resolves them exactly);
- possessive quantifiers and atomic groups: exact when the body is one character class
  (`C*+` = `C*(?!C)`) or its language is prefix-free (at most one way to match, so committing
  loses nothing); refused otherwise;
- refused: backreferences, conditional groups, `(?u)` (shorthand classes are ASCII here),
  `(?L)`, assertions inside lookaround bodies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from re import _constants as sre

from sgl_runtime.constrained.automata import ANY_CHAR, EPSILON, Charset, Dfa
from sgl_runtime.constrained.automata_ops import concat, difference, intersect, union, up_to
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_charsets import (
    MULTILINE,
    NEWLINE,
    SINGLE_CHAR_OPS,
    WORD,
    node_charset,
)

MAX_NFA_STATES = 100_000
BUILT_REPEAT_FROM = 8  # optional repeats from this count: unrolled up to UNROLLED_STATES, else one Dfa
UNROLLED_STATES = MAX_NFA_STATES // 2  # NFA states of a variable-width body times its optional count, unrolled
ANY_STRING = Dfa((((ANY_CHAR, 0),),), frozenset({0}))


@dataclass(frozen=True)
class Guard:
    """Holds at a position when the text before it is in `prefix` and the text after it in
    `suffix` (None = no condition on that side)."""

    prefix: Dfa | None
    suffix: Dfa | None


def _ends_with(cs: Charset) -> Dfa:
    return concat(ANY_STRING, Dfa((((cs, 1),), ()), frozenset({1})))


def _starts_with(cs: Charset) -> Dfa:
    return concat(Dfa((((cs, 1),), ()), frozenset({1})), ANY_STRING)


_WORD_BEFORE, _WORD_AFTER = _ends_with(WORD), _starts_with(WORD)
_NO_WORD_BEFORE, _NO_WORD_AFTER = difference(ANY_STRING, _WORD_BEFORE), difference(ANY_STRING, _WORD_AFTER)
_NONEMPTY = concat(Dfa((((ANY_CHAR, 1),), ()), frozenset({1})), ANY_STRING)
_LINE_START = union(EPSILON, _ends_with(NEWLINE))
_LINE_END = union(EPSILON, _starts_with(NEWLINE))
_FINAL_NEWLINE = union(EPSILON, Dfa((((NEWLINE, 1),), ()), frozenset({1})))
ANCHORS = {  # AT code -> alternative guards (flags: multiline or not)
    (sre.AT_BEGINNING_STRING, False): [Guard(EPSILON, None)],
    (sre.AT_BEGINNING, False): [Guard(EPSILON, None)],
    (sre.AT_BEGINNING, True): [Guard(_LINE_START, None)],
    (sre.AT_END_STRING, False): [Guard(None, EPSILON)],
    (sre.AT_END, False): [Guard(None, _FINAL_NEWLINE)],
    (sre.AT_END, True): [Guard(None, _LINE_END)],
    (sre.AT_BOUNDARY, False): [Guard(_WORD_BEFORE, _NO_WORD_AFTER), Guard(_NO_WORD_BEFORE, _WORD_AFTER)],
    # \B between two non-word sides, except in the empty string (where re never matches it)
    (sre.AT_NON_BOUNDARY, False): [
        Guard(_WORD_BEFORE, _WORD_AFTER),
        Guard(intersect(_NO_WORD_BEFORE, _NONEMPTY), _NO_WORD_AFTER),
        Guard(EPSILON, intersect(_NO_WORD_AFTER, _NONEMPTY)),
    ],
}


class RegexNfa:
    """Thompson construction over `re._parser` nodes; `build` returns (start, end)."""

    def __init__(self, subautomaton: Callable[[list, int], Dfa]) -> None:
        self.edges: list[list[tuple[Charset, int]]] = []
        self.eps: list[list[int]] = []
        self.guarded: list[list[tuple[Guard, int]]] = []
        self.copies: dict[int, list] = {}  # the optional copies of unrolled repeats (automata_ops.undominated)
        self._subautomaton = subautomaton  # assertion-free nodes -> their exact Dfa

    @property
    def has_guards(self) -> bool:
        return any(self.guarded)

    def add_state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        self.guarded.append([])
        if len(self.edges) > MAX_NFA_STATES:
            raise ConstraintError(f"regex too large: its automaton needs more than {MAX_NFA_STATES} NFA states")
        return len(self.edges) - 1

    def build(self, nodes: list, flags: int) -> tuple[int, int]:
        start = end = self.add_state()
        for op, av in nodes:
            s, e = self._node(op, av, flags)
            self.eps[end].append(s)
            end = e
        return start, end

    # ---- private: one node each ----------------------------------------------------------

    def _node(self, op, av, flags: int) -> tuple[int, int]:
        if op in SINGLE_CHAR_OPS:
            return self._char(node_charset(op, av, flags))
        if op is sre.SUBPATTERN:
            _, add, remove, body = av
            _check_flags(add | remove)
            return self.build(list(body), (flags | add) & ~remove)
        if op is sre.BRANCH:
            start, end = self.add_state(), self.add_state()
            for alternative in av[1]:
                s, e = self.build(list(alternative), flags)
                self.eps[start].append(s)
                self.eps[e].append(end)
            return start, end
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            lo, hi, body = av
            return self._repeat(list(body), lo, None if hi == sre.MAXREPEAT else hi, flags)
        if op is sre.POSSESSIVE_REPEAT:
            return self._possessive(av, flags)
        if op is sre.ATOMIC_GROUP:
            return self._atomic(list(av), flags, "atomic group (?>...)")
        if op is sre.AT:
            return self._anchor(av, flags)
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            return self._lookaround(op is sre.ASSERT, av[0], list(av[1]), flags)
        if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
            what = "backreference" if op is sre.GROUPREF else "conditional group (?(id)yes|no)"
            raise ConstraintError(
                f"unsupported regex feature: {what} (matches a language that is not regular, or depends on captures)"
            )
        raise ConstraintError(f"unsupported regex feature: {op}")

    def _char(self, cs: Charset) -> tuple[int, int]:
        start, end = self.add_state(), self.add_state()
        if not cs.is_empty():
            self.edges[start].append((cs, end))
        return start, end

    def _repeat(self, body: list, lo: int, hi: int | None, flags: int) -> tuple[int, int]:
        start = end = self.add_state()
        for _ in range(lo):
            s, e = self.build(body, flags)
            self.eps[end].append(s)
            end = e
        if hi is None:
            s, e = self.build(body, flags)
            hub = self.add_state()
            self.eps[end].append(hub)
            self.eps[hub].append(s)
            self.eps[e].append(hub)
            return start, hub
        tail = self._optional_repeats(body, hi - lo, flags) if hi - lo >= BUILT_REPEAT_FROM else None
        if tail is not None:
            s, e = self._embed(tail)
            self.eps[end].append(s)
            return start, e
        out = self.add_state()
        copies = []  # (first state, size) of each optional copy
        for _ in range(hi - lo):
            self.eps[end].append(out)
            base = len(self.edges)
            s, e = self.build(body, flags)
            copies.append((base, len(self.edges) - base))
            self.eps[end].append(s)
            end = e
        self.eps[end].append(out)
        if len(copies) > 1 and len({size for _, size in copies}) == 1:  # alike, as built from one body
            for k, (base, size) in enumerate(copies):
                for offset in range(size):
                    self.copies.setdefault(base + offset, []).append((out, offset, k))
        return start, out

    def _optional_repeats(self, body: list, count: int, flags: int) -> Dfa | None:
        """`body` repeated 0..count times as one Dfa (automata_ops.up_to) when unrolling it would
        make a large NFA; None (unrolled) for a fixed-width body, one with assertions (as guards)
        or a smaller one: the subset construction keeps one copy per position of the body alive
        (automata_ops.undominated), which is faster than up_to's count of determinizations."""
        try:
            dfa = self._subautomaton(body, flags)
        except ConstraintError:
            return None
        if _fixed_width(dfa):
            return None
        copy = RegexNfa(self._subautomaton)
        copy.build(body, flags)  # one copy, to size the unrolled NFA
        return None if len(copy.edges) * count <= UNROLLED_STATES else up_to(dfa, count)

    def _embed(self, dfa: Dfa) -> tuple[int, int]:
        base = len(self.edges)
        for _ in range(dfa.num_states):
            self.add_state()
        for i, edges in enumerate(dfa.edges):
            self.edges[base + i] = [(cs, base + t) for cs, t in edges]
        end = self.add_state()
        for f in dfa.finals:
            self.eps[base + f].append(end)
        return base, end

    def _possessive(self, av, flags: int) -> tuple[int, int]:
        lo, hi, body = av
        body = list(body)
        hi = None if hi == sre.MAXREPEAT else hi
        if hi == lo:  # an exact count: nothing to commit to
            return self._repeat(body, lo, hi, flags)
        if len(body) == 1 and body[0][0] in SINGLE_CHAR_OPS:
            cs = node_charset(body[0][0], body[0][1], flags)
            run_ends = Guard(None, difference(ANY_STRING, _starts_with(cs)))
            start, end = self.add_state(), self.add_state()
            s, e = self._repeat(body, lo, None if hi is None else hi - 1, flags)
            self.eps[start].append(s)
            self.guarded[e].append((run_ends, end))  # stopped early: the run of `cs` ended here
            if hi is not None:
                s, e = self._repeat(body, hi, hi, flags)  # or took the maximum count
                self.eps[start].append(s)
                self.eps[e].append(end)
            return start, end
        return self._atomic(
            [(sre.MAX_REPEAT, (lo, sre.MAXREPEAT if hi is None else hi, body))], flags, "possessive quantifier"
        )

    def _atomic(self, body: list, flags: int, what: str) -> tuple[int, int]:
        dfa = self._subautomaton(body, flags)  # refuses assertions inside
        if not _prefix_free(dfa):
            raise ConstraintError(
                f"unsupported regex feature: {what} whose body can match both a string "
                "and a longer extension of it (committing to one changes the language)"
            )
        return self.build(body, flags)

    def _anchor(self, code, flags: int) -> tuple[int, int]:
        return self._guards(_anchor_guards(code, flags))

    def _lookaround(self, positive: bool, direction: int, body: list, flags: int) -> tuple[int, int]:
        """`(?=X)` holds where the rest of the text is in X·Σ*, `(?<=X)` where the text before is
        in Σ*·X. A lookahead ending in `$`/`\\Z` (`(?!\\.$)`, common in JSON-Schema patterns) or a
        lookbehind starting with `^`/`\\A` replaces Σ* by that anchor's side language."""
        edge = _edge_anchor_language(body[-1:] if direction == 1 else body[:1], flags, direction)
        if edge is not None:
            body = body[:-1] if direction == 1 else body[1:]
        # a lookahead may also start with `^`/`\\A` (`(?!^[0-9]+$)`): a condition on the text before
        before = _edge_anchor_language(body[:1], flags, -1) if direction == 1 else None
        if before is not None:
            body = body[1:]
        dfa = self._subautomaton(body, flags)
        if direction == 1:
            language = concat(dfa, ANY_STRING if edge is None else edge)
            if before is not None:  # holds where both hold; its negation where either fails
                if positive:
                    return self._guards([Guard(before, language)])
                return self._guards(
                    [Guard(difference(ANY_STRING, before), None), Guard(None, difference(ANY_STRING, language))]
                )
            guard = Guard(None, language if positive else difference(ANY_STRING, language))
        else:
            language = concat(ANY_STRING if edge is None else edge, dfa)
            guard = Guard(language if positive else difference(ANY_STRING, language), None)
        return self._guards([guard])

    def _guards(self, alternatives: list[Guard]) -> tuple[int, int]:
        start, end = self.add_state(), self.add_state()
        for guard in alternatives:
            self.guarded[start].append((guard, end))
        return start, end


def _anchor_guards(code, flags: int) -> list[Guard]:
    multiline = bool(flags & MULTILINE) and code in (sre.AT_BEGINNING, sre.AT_END)
    guards = ANCHORS.get((code, multiline))
    if guards is None:
        raise ConstraintError(f"unsupported regex feature: anchor {code}")
    return guards


def _edge_anchor_language(edge: list, flags: int, direction: int) -> Dfa | None:
    """For a lookahead's last node (direction 1) that is an anchor conditioning only the text
    after it, that text's language; for a lookbehind's first node conditioning only the text
    before it, likewise. None otherwise."""
    if len(edge) != 1 or edge[0][0] is not sre.AT:
        return None
    guards = _anchor_guards(edge[0][1], flags)
    if direction == 1 and all(g.prefix is None for g in guards):
        return union(*(ANY_STRING if g.suffix is None else g.suffix for g in guards))
    if direction != 1 and all(g.suffix is None for g in guards):
        return union(*(ANY_STRING if g.prefix is None else g.prefix for g in guards))
    return None


def _check_flags(flags: int) -> None:
    if flags & re.UNICODE.value:
        raise ConstraintError(
            "unsupported regex feature: (?u) flag (shorthand classes and case folding are ASCII in constraints)"
        )
    if flags & re.LOCALE.value:
        raise ConstraintError("unsupported regex feature: (?L) flag")


def _fixed_width(dfa: Dfa) -> bool:
    """True when every accepted string has the same length (no cycle, one depth for each state)."""
    depth = {0: 0}
    queue = [0]
    for s in queue:
        for _, t in dfa.edges[s]:
            if t not in depth:
                depth[t] = depth[s] + 1
                queue.append(t)
            elif depth[t] != depth[s] + 1:
                return False
    return len({depth[f] for f in dfa.finals}) <= 1


def _prefix_free(dfa: Dfa) -> bool:
    """True when no accepted string is a proper prefix of another accepted string."""
    for final in dfa.finals:
        seen, stack = {final}, [final]
        while stack:
            for _, t in dfa.edges[stack.pop()]:
                if t in dfa.finals:
                    return False
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
    return True
