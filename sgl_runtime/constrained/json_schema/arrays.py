"""Array schemas as DFAs: prefixItems, items, minItems/maxItems and contains/minContains/maxContains.

uniqueItems is not regular in general: it is accepted only where it cannot fail (maxItems <= 1),
otherwise it is unsupported (ConstraintError, or ignored with lenient=True).
"""

from __future__ import annotations

from sgl_runtime.constrained.automata import Dfa
from sgl_runtime.constrained.automata_ops import Nfa, concat, difference, intersect
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.values import EXACT, count_keyword


def array_dfa(comp, schema: dict, level: int, mode: int) -> Dfa:
    """The compact serialisations of arrays valid under the array keywords of `schema`."""
    prefix = schema.get("prefixItems", [])
    if not isinstance(prefix, list):
        raise ConstraintError("prefixItems: expected a list of schemas")
    min_items = count_keyword(schema, "minItems", 0)
    max_items = count_keyword(schema, "maxItems", None)
    if schema.get("uniqueItems") is True and not (max_items is not None and max_items <= 1):
        comp.unsupported("uniqueItems", "uniqueness of items is not a regular constraint")
    prefix_dfas = [comp.compile(s, level + 1, mode) for s in prefix]
    rest = comp.compile(schema.get("items", True), level + 1, mode)
    if rest.is_empty():
        max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
    counter = _ContainsCounter(comp, schema, level, mode)
    top = max_items if max_items is not None else max(len(prefix), min_items, 1)
    elements = [prefix_dfas[i] if i < len(prefix) else rest for i in range(top + 1)]
    return _body(comp, elements, min_items, max_items, top, counter)


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


def _body(comp, elements: list[Dfa], min_items: int, max_items: int | None, top: int, counter: _ContainsCounter) -> Dfa:
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

    start = node((0, 0))
    while work:
        pos, count = key = work.pop()
        src = nodes[key]
        if pos >= min_items and counter.final(count):
            nfa.finals.add(src)
        if max_items is not None and pos >= max_items:
            continue
        nxt_pos = min(pos + 1, top)
        for dfa, nxt_count in counter.branches(elements[pos], count):
            if dfa.is_empty():
                continue
            if pos > 0:
                if id(dfa) not in with_comma:
                    with_comma[id(dfa)] = (dfa, concat(comma, dfa))
                dfa = with_comma[id(dfa)][1]
            s, fs = nfa.embed(dfa)
            nfa.add_eps(src, s)
            dst = node((nxt_pos, nxt_count))
            for f in fs:
                nfa.add_eps(f, dst)
    return nfa.determinize_between(start, comp.tokens.lbracket, comp.tokens.rbracket)
