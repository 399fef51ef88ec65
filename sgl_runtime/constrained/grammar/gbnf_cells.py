"""Character cells for the GBNF lowering: the coarsest partition of the code points a grammar
mentions in which every character class is a union of cells, and each cell as a lark regex."""

from __future__ import annotations

import itertools

from sgl_runtime.constrained.grammar.gbnf_syntax import MAX_CODE_POINT, Alt, Chars, GbnfGrammar, Node, Repeat, Seq

_SURROGATES = (0xD800, 0xDFFF)


def cells_of(grammar: GbnfGrammar, names):
    """Disjoint code point cells (each a tuple of ranges) and each character set's cell ids."""
    sets = sorted({no_surrogates(c.ranges) for n in names for c in char_sets(grammar.rules[n])})
    bounds = sorted({b for s in sets for lo, hi in s for b in (lo, hi + 1)})
    signature: dict = {}  # frozenset of set indices -> list of ranges
    for lo, nxt in itertools.pairwise(bounds):
        owners = frozenset(i for i, s in enumerate(sets) if _covers(s, lo))
        if owners:
            signature.setdefault(owners, []).append((lo, nxt - 1))
    cells = [tuple(r) for r in signature.values()]
    cell_of_set = {s: [] for s in sets}
    for cid, owners in enumerate(signature):
        for i in owners:
            cell_of_set[sets[i]].append(cid)
    return cells, cell_of_set


def char_sets(node: Node):
    if isinstance(node, Chars):
        yield node
    elif isinstance(node, (Seq, Alt)):
        for child in node.items if isinstance(node, Seq) else node.options:
            yield from char_sets(child)
    elif isinstance(node, Repeat):
        yield from char_sets(node.body)


def no_surrogates(ranges: tuple) -> tuple:
    out = []
    for lo, hi in ranges:
        if lo < _SURROGATES[0]:
            out.append((lo, min(hi, _SURROGATES[0] - 1)))
        if hi > _SURROGATES[1]:
            out.append((max(lo, _SURROGATES[1] + 1), hi))
    return tuple(out)


def _covers(ranges: tuple, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def cell_regex(cell: tuple) -> str:
    """A one-character class for `cell`, negated when that lists fewer code points (interegular
    expands every listed range into its characters; what a negated class leaves out stays one
    `anything_else` symbol)."""
    size = sum(hi - lo + 1 for lo, hi in cell)
    if size <= 256:
        return f"[{''.join(_class_item(lo, hi) for lo, hi in cell)}]"
    outside, start = [], 0
    for lo, hi in list(cell) + [(MAX_CODE_POINT + 1, MAX_CODE_POINT + 1)]:
        if lo > start:
            outside.append((start, lo - 1))
        start = hi + 1
    outside = list(no_surrogates(tuple(outside)))
    if size <= sum(hi - lo + 1 for lo, hi in outside):
        return f"[{''.join(_class_item(lo, hi) for lo, hi in cell)}]"
    if not outside:
        return "[\\s\\S]"
    return f"[^{''.join(_class_item(lo, hi) for lo, hi in outside)}]"


def _class_item(lo: int, hi: int) -> str:
    return _escaped(lo) if lo == hi else f"{_escaped(lo)}-{_escaped(hi)}"


def _escaped(cp: int) -> str:
    if chr(cp) in "\\]^-[":
        return "\\" + chr(cp)
    if chr(cp) == "/":
        return "\\/"
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"
