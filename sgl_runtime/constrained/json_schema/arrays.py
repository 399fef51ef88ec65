"""Array schemas as DFAs: prefixItems, items, minItems/maxItems and contains/minContains/maxContains.

uniqueItems is not regular in general: it is exact where it cannot fail (maxItems <= 1) and where
the items take a few values (`unique_items`: the states carry the set of values used), otherwise
unsupported (ConstraintError naming why, or ignored with lenient=True).
"""

from __future__ import annotations

from sgl_runtime.constrained.automata import Dfa
from sgl_runtime.constrained.automata_ops import Nfa, concat, difference, intersect
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.unique_items import ItemValues, UniqueItemsUnsupported, check_state_count
from sgl_runtime.constrained.json_schema.values import EXACT, count_keyword

SPELLED_POSITIONS = 16  # grammar form, compact JSON: the engine counts the items of a longer maxItems
COUNTED_BY_GRAMMAR = "maxItems: counted"  # a refusal of the automaton that the grammar form takes over


def array_dfa(comp, schema: dict, level: int, mode: int) -> Dfa:
    """The compact serialisations of arrays valid under the array keywords of `schema`."""
    prefix = schema.get("prefixItems", [])
    if not isinstance(prefix, list):
        raise ConstraintError("prefixItems: expected a list of schemas")
    min_items = count_keyword(schema, "minItems", 0)
    max_items = count_keyword(schema, "maxItems", None)
    prefix_dfas = [comp.compile(s, level + 1, mode) for s in prefix]
    rest = comp.compile(schema.get("items", True), level + 1, mode)
    if rest.is_empty():
        max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
    if comp.counts_items and max_items is not None and max_items > SPELLED_POSITIONS and "contains" not in schema:
        raise ConstraintError(f"{COUNTED_BY_GRAMMAR} by the grammar form beyond {SPELLED_POSITIONS} items")
    counter = _ContainsCounter(comp, schema, level, mode)
    top = max_items if max_items is not None else max(len(prefix), min_items, 1)
    elements = [prefix_dfas[i] if i < len(prefix) else rest for i in range(top + 1)]
    if schema.get("uniqueItems") is True and not (max_items is not None and max_items <= 1):
        try:
            unique = ItemValues(elements if max_items is None else elements[:max_items])
            return _body(comp, elements, min_items, max_items, top, counter, unique)
        except UniqueItemsUnsupported as exc:
            comp.unsupported("uniqueItems", str(exc))  # lenient: uniqueness is ignored
    return _body(comp, elements, min_items, max_items, top, counter, None)


class _ContainsCounter:
    """Splits each element language into matching / not matching `contains`, and counts matches."""

    def __init__(self, comp, schema: dict, level: int, mode: int) -> None:
        self.active = "contains" in schema
        self._split: dict = {}
        self.min = count_keyword(schema, "minContains", 1) if self.active else 0
        self.max = count_keyword(schema, "maxContains", None) if self.active else None
        if self.active:
            self.match = comp.compile(schema["contains"], level + 1, mode)
            self.exact_match = comp.compile(schema["contains"], level + 1, EXACT)

    def branches(self, element: Dfa, count: int) -> list[tuple[Dfa, int]]:
        if not self.active:
            return [(element, 0)]
        if id(element) not in self._split:
            self._split[id(element)] = (element, difference(element, self.exact_match), intersect(element, self.match))
        _, miss, hit_dfa = self._split[id(element)]
        out = [(miss, count)]
        hit = count + 1
        if self.max is None:
            hit = min(hit, max(self.min, 1))
        elif hit > self.max:
            return out
        out.append((hit_dfa, hit))
        return out

    def final(self, count: int) -> bool:
        return count >= self.min


def _body(
    comp,
    elements: list[Dfa],
    min_items: int,
    max_items: int | None,
    top: int,
    counter: _ContainsCounter,
    unique: ItemValues | None,
) -> Dfa:
    """`[` items `]` as an NFA over (position, contains count, values used when unique) states."""
    comma = comp.tokens.comma
    with_comma: dict = {}
    nfa = Nfa()
    nodes: dict = {}
    work: list = []

    def node(key) -> int:
        if key not in nodes:
            nodes[key] = nfa.add_state()
            work.append(key)
        return nodes[key]

    start = node((0, 0, frozenset()))
    while work:
        pos, count, used = key = work.pop()
        src = nodes[key]
        if pos >= min_items and counter.final(count):
            nfa.finals.add(src)
        if max_items is not None and pos >= max_items:
            continue
        nxt_pos = min(pos + 1, top)
        choices = [(elements[pos], used)] if unique is None else unique.choices(elements[pos], used)
        for item, nxt_used in choices:
            for dfa, nxt_count in counter.branches(item, count):
                if dfa.is_empty():
                    continue
                if pos > 0:
                    if id(dfa) not in with_comma:
                        with_comma[id(dfa)] = (dfa, concat(comma, dfa))
                    dfa = with_comma[id(dfa)][1]
                s, fs = nfa.embed(dfa)
                nfa.add_eps(src, s)
                dst = node((nxt_pos, nxt_count, nxt_used))
                for f in fs:
                    nfa.add_eps(f, dst)
        if unique is not None:
            check_state_count(len(nodes))
    return nfa.determinize_between(start, comp.tokens.lbracket, comp.tokens.rbracket)
