"""Terminals that spell some of the same texts, split into terminals that spell none in common.

Two terminals of one parser position whose texts overlap only where both spell the same text
(prefix_free.EQUAL: a free key terminal `"[^"]*":` of one object alternative beside the key
`"run":` of another) leave the lexer no way to choose. `refine` splits such terminals into
disjoint pieces (the texts of both, of the first only, of the second only, by automaton
products, ByteDFA.combined) and makes each former terminal a rule choosing among its pieces: the
language is the same, the lexer reads a shared text as the one piece, and the parser follows each
rule it may reduce to (the grammar's conflicts are kept, grammar/forking.py).
"""

from __future__ import annotations

from typing import Optional

from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.grammar.prefix_free import EQUAL

MAX_PIECES = 256  # pieces all split terminals may become before the grammar is refused instead
PIECE_RULE = "piece_"  # the rule of a split terminal T is `piece_t` (grammar/frames.py reads it)


def refine(text: str, terminals: dict, pairs: dict) -> Optional[tuple[str, dict]]:
    """(grammar text, terminal automata) where the terminals of `pairs` (prefix_free.overlapping_pairs)
    are rules over disjoint pieces; None where that cannot help: a pair where one text is a proper
    prefix of another's, a terminal that is not a plain ByteDFA (a counted string), too many pieces.
    `text` is a placeholder grammar (`rule: A b | C`, `A: "<A>"`, source.placeholder_grammar)."""
    if not pairs or any(kind != EQUAL for kind in pairs.values()):
        return None
    names = sorted({name for pair in pairs for name in pair})
    if any(type(terminals[name]) is not ByteDFA for name in names):
        return None
    terminals = dict(terminals)
    pieces = {name: terminals[name] for name in names}  # piece name -> automaton
    made_of = {name: [name] for name in names}  # terminal -> its pieces, disjoint
    fresh = (f"TP{i}" for i in range(10**9))
    split = True
    while split:
        split = False
        for a, b in pairs:
            found = _meeting(pieces, made_of[a], made_of[b])
            if found is None:
                continue
            x, y, both = found
            dx, dy = pieces.pop(x), pieces.pop(y)
            shared = _named(fresh, terminals, both)
            parts = {x: [shared], y: [shared]}
            for old, rest in ((x, dx.combined(dy, False)), (y, dy.combined(dx, False))):
                if not rest.is_empty():
                    parts[old].append(_named(fresh, terminals, rest))
            for name in [*parts[x], *parts[y]]:
                pieces.setdefault(name, terminals[name])
            for terminal, own in made_of.items():
                made_of[terminal] = list(dict.fromkeys(p for q in own for p in parts.get(q, [q])))
            if len(pieces) > MAX_PIECES:
                return None
            split = True
    return _rewritten(text, made_of), terminals


def _meeting(pieces: dict, of_a: list, of_b: list) -> Optional[tuple]:
    """(x, y, the texts both spell) for the first two distinct pieces of `of_a` and `of_b` that
    share a text, else None."""
    for x in of_a:
        for y in of_b:
            if x != y:
                both = pieces[x].combined(pieces[y], True)
                if not both.is_empty():
                    return x, y, both
    return None


def _named(fresh, terminals: dict, dfa: ByteDFA) -> str:
    name = next(n for n in fresh if n not in terminals)
    terminals[name] = dfa
    return name


def _rewritten(text: str, made_of: dict) -> str:
    """`text` with each split terminal T replaced by the rule `piece_t: P1 | P2 ...`."""
    rule = {t: f"{PIECE_RULE}{t.lower()}" for t, own in made_of.items() if own != [t]}
    lines = []
    for line in text.splitlines():
        name, sep, body = line.partition(": ")
        if name in rule:  # the terminal's own placeholder line: its pieces' lines instead
            continue
        if sep and name[:1].islower():
            body = " | ".join(" ".join(rule.get(x, x) for x in alt.split()) for alt in body.split("|"))
        lines.append(f"{name}{sep}{body}")
    for t, name in rule.items():
        lines.append(f"{name}: {' | '.join(made_of[t])}")
    pieces = dict.fromkeys(p for t in rule for p in made_of[t])
    lines.extend(f'{p}: "<{p}>"' for p in pieces if p not in made_of or made_of[p] != [p])
    return "\n".join(lines) + "\n"
