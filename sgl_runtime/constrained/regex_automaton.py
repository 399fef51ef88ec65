"""A Python regex as the exact minimal character Dfa of the strings it fully matches (or searches).

`regex_to_dfa(pattern)` parses with `re._parser` (the parser `re` itself uses, so the syntax is
read exactly as `re.compile` reads it), builds a `RegexNfa` whose assertions are guarded epsilon
edges, and determinizes it in one subset construction that carries, per DFA state:

- the state of every distinct prefix language (lookbehind, `^`, `\\b`...) on the text read so
  far: a guard's prefix condition is decided when its edge is taken;
- per NFA configuration, the pending suffix obligations (lookahead, `$`, `\\b`...): the states
  of the suffix automata started where their guards were taken; a configuration dies when one
  of its obligations can no longer be met and accepts only when all of them accept.

That is the intersection / complement construction of lookaround, done lazily. Before the Dfa
is returned, `regex_selfcheck` compares it with `re` on sampled strings; a disagreement
refuses the regex. Shorthand classes and case folding are ASCII (`re.ASCII` semantics).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections import defaultdict
from re import _parser as sre_parse

from sgl_runtime.constrained.automata import (
    Charset,
    Dfa,
    _charsets_of,
    _check_size,
    _minimize,
    _Partition,
)
from sgl_runtime.constrained.automata_ops import Nfa, undominated
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_nfa import RegexNfa
from sgl_runtime.constrained.regex_properties import expand_properties
from sgl_runtime.constrained.regex_selfcheck import check_against_re

_Config = tuple  # (nfa state, frozenset of (suffix id, suffix state))


@functools.lru_cache(maxsize=512)
def regex_to_dfa(pattern: str, search: bool = False) -> Dfa:
    """Strings `pattern` fully matches (search=True: strings in which it finds a match), with
    `re.ASCII` semantics. Raises ConstraintError naming an invalid or unsupported construct,
    or when the self-check against `re` finds a disagreement."""
    if not isinstance(pattern, str):
        raise ConstraintError(f"regex must be a string, got {type(pattern).__name__}")
    original = pattern
    pattern = expand_properties(pattern)  # what is compiled and what the self-check gives `re`
    try:
        with warnings.catch_warnings():  # `[a||b]` ("possible set union") means what it says today
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern, re.ASCII)
            parsed = sre_parse.parse(pattern, re.ASCII.value)
    except re.error as exc:
        raise ConstraintError(f"invalid regex {original!r}: {exc}") from None
    except ValueError as exc:  # ASCII with an inline (?u)
        raise ConstraintError(
            f"unsupported regex feature in {original!r}: {exc} (shorthand classes are ASCII in constraints)"
        ) from None
    except RecursionError:
        raise ConstraintError(f"regex {original!r} nests too deeply") from None
    flags = parsed.state.flags & ~re.ASCII.value
    nodes = list(parsed)
    if search:
        nodes = _searched(nodes, flags)
    else:
        nodes = _from_the_start(nodes)
    try:
        dfa = _compile(nodes, flags, allow_guards=True)
    except ConstraintError as exc:
        raise ConstraintError(f"regex {original!r}: {exc}") from None
    check_against_re(dfa, pattern, search=search)
    return dfa


# `(?s:.*)`: the search wrappers cross newlines whatever the pattern's flags
_ANY_RUN = (
    sre_parse.SUBPATTERN,
    (None, re.DOTALL.value, 0, [(sre_parse.MAX_REPEAT, (0, sre_parse.MAXREPEAT, [(sre_parse.ANY, None)]))]),
)


_PLAIN_REPEATS = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT)
_CONTEXTUAL = {sre_parse.AT, sre_parse.ASSERT, sre_parse.ASSERT_NOT, sre_parse.GROUPREF, sre_parse.GROUPREF_EXISTS}


def _searched(nodes: list, flags: int) -> list:
    """The nodes whose full matches are the texts in which `nodes` finds a match: `nodes` between
    `(?s:.*)` runs, with the counted repeats beside a run cut (`_cut`). A leading `^`/`\\A` (not
    multiline) or a trailing `\\Z` holds exactly where no run is: the anchor and that run go
    (`^[0-9]{12}\\Z` is then a plain full match, without guards to track)."""
    starts = bool(nodes) and nodes[0] in _STRING_STARTS[bool(flags & re.MULTILINE.value)]
    ends = bool(nodes) and nodes[-1] == _STRING_END
    body = nodes[int(starts) : len(nodes) - int(ends)]
    if starts:
        body = _from_the_start(body)
    else:
        body = _cut(body, 0)
    if not ends:
        body = _cut(body, -1)
    group = (sre_parse.SUBPATTERN, (None, 0, 0, body))
    return ([] if starts else [_ANY_RUN]) + [group] + ([] if ends else [_ANY_RUN])


_STRING_END = (sre_parse.AT, sre_parse.AT_END_STRING)
_STRING_STARTS = {  # multiline or not -> the nodes that hold only at the start of the text
    False: [(sre_parse.AT, sre_parse.AT_BEGINNING), (sre_parse.AT, sre_parse.AT_BEGINNING_STRING)],
    True: [(sre_parse.AT, sre_parse.AT_BEGINNING_STRING)],
}


def _start_anchor(node) -> bool:
    return node[0] is sre_parse.AT and node[1] in (sre_parse.AT_BEGINNING, sre_parse.AT_BEGINNING_STRING)


def _from_the_start(nodes: list) -> list:
    """`nodes`, matched from the start of the text, with the `^`/`\\A` that open the body of a
    lookahead there left out: at position 0 they hold (`^(?!(^https?://))...`, which would
    otherwise put an anchor inside a lookaround). Zero-width nodes at the front (anchors, other
    lookaheads) keep the position at 0."""
    out = list(nodes)
    for i, (op, av) in enumerate(out):
        if _start_anchor((op, av)):
            continue
        if op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT) and av[0] == 1:
            out[i] = (op, (1, _without_start_anchors(list(av[1]))))
            continue
        break
    return out


def _without_start_anchors(nodes: list) -> list:
    """`nodes` without the start anchors at their front (inside leading groups and alternatives too)."""
    while nodes and _start_anchor(nodes[0]):
        nodes = nodes[1:]
    if not nodes:
        return nodes
    op, av = nodes[0]
    if op is sre_parse.SUBPATTERN:
        group, add_flags, del_flags, body = av
        return [(op, (group, add_flags, del_flags, _without_start_anchors(list(body)))), *nodes[1:]]
    if op is sre_parse.BRANCH:
        return [(op, (av[0], [_without_start_anchors(list(alt)) for alt in av[1]])), *nodes[1:]]
    return nodes


def _cut(nodes: list, at: int) -> list:
    """`nodes` beside a `(?s:.*)` run, with a counted repeat X{m,n} at the front (at=0) or the
    back (at=-1) cut to X{m}: any text ending in X^k (k > m) also ends in X^m, and any text starting
    with X^k also starts with X^m, so the search language is the same, and the subset construction
    no longer tracks up to n overlapping counts (`[ -~]{1,1023}/$` unanchored: 15 s before, 3 ms
    after). Descends into groups and alternatives at that end; stops at anything else."""
    if not nodes:
        return nodes
    i = 0 if at == 0 else len(nodes) - 1
    op, av = nodes[i]
    if op in _PLAIN_REPEATS and av[0] < av[1] and not _contextual(av[2]):
        node = (op, (av[0], av[0], av[2]))
    elif op is sre_parse.SUBPATTERN:
        group, add_flags, del_flags, body = av
        node = (op, (group, add_flags, del_flags, _cut(list(body), at)))
    elif op is sre_parse.BRANCH:
        node = (op, (av[0], [_cut(list(alt), at) for alt in av[1]]))
    else:
        return nodes
    return [*nodes[:i], node, *nodes[i + 1 :]]


def _contextual(nodes) -> bool:
    """Whether `nodes` hold an assertion or backreference (whose matches depend on the text around)."""
    for op, av in nodes:
        if op in _CONTEXTUAL:
            return True
        if op is sre_parse.SUBPATTERN and _contextual(av[3]):
            return True
        if op in (*_PLAIN_REPEATS, sre_parse.POSSESSIVE_REPEAT) and _contextual(av[2]):
            return True
        if op is sre_parse.ATOMIC_GROUP and _contextual(av):
            return True
        if op is sre_parse.BRANCH and any(_contextual(alt) for alt in av[1]):
            return True
    return False


def _compile(nodes: list, flags: int, allow_guards: bool) -> Dfa:
    nfa = RegexNfa(_assertion_free)
    start, end = nfa.build(nodes, flags)
    if nfa.has_guards and not allow_guards:
        raise ConstraintError(
            "unsupported regex feature: an assertion (anchor, \\b or lookaround) inside "
            "a lookaround, atomic group or possessive repeat"
        )
    return _determinize(nfa, start, end)


def _assertion_free(nodes: list, flags: int) -> Dfa:
    return _compile(nodes, flags, allow_guards=False)


def _determinize(nfa: RegexNfa, start: int, end: int) -> Dfa:
    if not nfa.has_guards:
        return _determinize_plain(nfa, start, end)
    guards = list(dict.fromkeys(g for out in nfa.guarded for g, _ in out))
    prefixes = list(dict.fromkeys(g.prefix for g in guards if g.prefix is not None))
    suffixes = list(dict.fromkeys(g.suffix for g in guards if g.suffix is not None))
    prefix_id = {d: i for i, d in enumerate(prefixes)}
    suffix_id = {d: i for i, d in enumerate(suffixes)}
    part = _Partition([cs for out in nfa.edges for cs, _ in out] + _charsets_of(prefixes) + _charsets_of(suffixes))
    moves = [_moves_by_class(out, part) for out in nfa.edges]
    prefix_tables = [part.table(d) for d in prefixes]
    suffix_tables = [part.table(d) for d in suffixes]
    universal = [_universal_states(d) for d in suffixes]
    guard_edges = [[(prefix_id.get(g.prefix), suffix_id.get(g.suffix), t) for g, t in out] for out in nfa.guarded]

    def closure(track: tuple, configs: set) -> frozenset:
        seen, stack = set(configs), list(configs)
        while stack:
            q, pending = stack.pop()
            targets = [(t, pending) for t in nfa.eps[q]]
            for p_id, s_id, t in guard_edges[q]:
                if p_id is not None and (track[p_id] is None or track[p_id] not in prefixes[p_id].finals):
                    continue
                if s_id is None or 0 in universal[s_id]:
                    targets.append((t, pending))
                elif not suffixes[s_id].is_empty():
                    targets.append((t, pending | {(s_id, 0)}))
            for config in targets:
                if config not in seen:
                    seen.add(config)
                    stack.append(config)
        return undominated(frozenset(seen), nfa.copies, tagged=True) if nfa.copies else frozenset(seen)

    def accepting(configs: frozenset) -> bool:
        return any(q == end and all(st in suffixes[s].finals for s, st in pending) for q, pending in configs)

    track0 = tuple(0 for _ in prefixes)
    first = (track0, closure(track0, {(start, frozenset())}))
    closed: dict = {}  # (track, configurations) -> (track, their closure)
    index, states, table, finals = {first: 0}, [first], [], set()
    for track, configs in states:
        if accepting(configs):
            finals.add(len(table))
        row = {}
        by_class: dict = defaultdict(set)
        for q, pending in configs:
            for c, targets in moves[q].items():
                for t in targets:
                    by_class[c].add((t, pending))
        for c, stepped in by_class.items():
            nxt_track = tuple(None if s is None else tbl[s].get(c) for s, tbl in zip(track, prefix_tables))
            nxt = set()
            for t, pending in stepped:
                advanced = _advance(pending, c, suffix_tables, universal)
                if advanced is not None:
                    nxt.add((t, advanced))
            if not nxt:
                continue
            found = (nxt_track, frozenset(nxt))
            key = closed.get(found)
            if key is None:  # the same configurations recur from many states and classes: close them once
                key = closed[found] = (nxt_track, closure(nxt_track, nxt))
            j = index.get(key)
            if j is None:
                j = index[key] = len(states)
                states.append(key)
                _check_size(len(states), "regex subset construction")
            row[c] = j
        table.append(row)
    return _minimize(table, finals, part)


def _determinize_plain(nfa: RegexNfa, start: int, end: int) -> Dfa:
    """The subset construction of an NFA without guards (most patterns; `_determinize` tracks guard
    obligations): the plain epsilon-NFA construction of automata_ops."""
    plain = Nfa()
    plain.edges, plain.eps, plain.finals, plain.copies = nfa.edges, nfa.eps, {end}, nfa.copies
    return plain.determinize(start)


def _advance(pending: frozenset, c: int, suffix_tables: list, universal: list):
    """Each obligation stepped on class `c`; None when one of them can no longer accept."""
    if not pending:
        return pending
    out = set()
    for s_id, st in pending:
        nxt = suffix_tables[s_id][st].get(c)
        if nxt is None:
            return None
        if nxt not in universal[s_id]:
            out.add((s_id, nxt))
    return frozenset(out)


def _moves_by_class(out: list[tuple[Charset, int]], part: _Partition) -> dict:
    moves: dict = defaultdict(list)
    for cs, t in out:
        for c in part.members[cs]:
            moves[c].append(t)
    return dict(moves)


def _universal_states(dfa: Dfa) -> frozenset:
    """States from which every continuation is accepted (a final state looping on every char)."""
    found = set()
    for s in dfa.finals:
        loop = [cs for cs, t in dfa.edges[s] if t == s]
        merged = Charset(frozenset())
        for cs in loop:
            merged = merged | cs
        if merged.negated and not merged.chars:
            found.add(s)
    return frozenset(found)
