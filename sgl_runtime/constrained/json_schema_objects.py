"""Object schemas as DFAs: properties (in schema order), required, additionalProperties,
patternProperties, propertyNames, dependentRequired and min/maxProperties.

Keys declared in `properties` come first, in the schema's order; every other key (extra keys,
required keys without a `properties` entry, keys named by dependentRequired) follows in any
order. In exact mode (used under `not`/`oneOf`/`if`) every named key may appear in any order, so
the language is exactly the set of valid objects (without duplicate keys).
"""

from __future__ import annotations

from itertools import combinations

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema_automata import (
    EMPTY, Dfa, Nfa, concat, difference, intersect, literal, union,
)
from sgl_runtime.constrained.json_schema_strings import (
    any_content, encode_content, literals_dfa, pattern_content, string_dfa, string_literal,
)
from sgl_runtime.constrained.json_schema_values import count_keyword

MAX_TRACKED_KEYS = 8
MAX_PATTERN_PROPERTIES = 3


def object_dfa(comp, schema: dict, level: int, exact: bool) -> Dfa:
    """The compact serialisations of objects valid under the object keywords of `schema`."""
    spec = _ObjectSpec(comp, schema, level, exact)
    return concat(comp.tokens.lbrace, spec.body(), comp.tokens.rbrace)


def _get(schema: dict, key: str, kind, default):
    value = schema.get(key, default)
    if not isinstance(value, kind):
        raise ConstraintError(f"{key}: invalid value {value!r}")
    return value


class _ObjectSpec:
    def __init__(self, comp, schema: dict, level: int, exact: bool) -> None:
        self.comp, self.level, self.exact = comp, level, exact
        self.props = _get(schema, "properties", dict, {})
        self.required = list(dict.fromkeys(_get(schema, "required", list, [])))
        self.additional = schema.get("additionalProperties", True)
        self.patterns = _get(schema, "patternProperties", dict, {})
        self.deps = _get(schema, "dependentRequired", dict, {})
        self.min_props = count_keyword(schema, "minProperties", 0)
        self.max_props = count_keyword(schema, "maxProperties", None)
        names = schema.get("propertyNames")
        self.names = None if names is None else intersect(comp.compile(names, level + 1, exact), string_dfa())
        if len(self.patterns) > MAX_PATTERN_PROPERTIES:
            raise ConstraintError(f"patternProperties: at most {MAX_PATTERN_PROPERTIES} patterns are supported")
        dep_keys = set(self.deps) | {k for v in self.deps.values() for k in v}
        named = list(self.props) + [k for k in self.required + sorted(dep_keys) if k not in self.props]
        self.named = list(dict.fromkeys(named))
        self.tracked = [k for k in self.named if exact or k not in self.props or k in dep_keys]
        self.fixed = [k for k in self.props if k not in self.tracked]
        if len(self.tracked) > MAX_TRACKED_KEYS:
            raise ConstraintError(f"object: more than {MAX_TRACKED_KEYS} keys must be accepted in any order")

    # ----------------------------------------------------------------- pieces
    def value_for(self, key: str) -> Dfa:
        parts = []
        if key in self.props:
            parts.append(self.props[key])
        matched = [s for p, s in self.patterns.items() if pattern_content(p).accepts(key)]
        parts += matched
        if key not in self.props and not matched:
            parts.append(self.additional)
        return intersect(*(self.comp.compile(p, self.level + 1, self.exact) for p in parts))

    def pair_for(self, key: str) -> Dfa:
        key_dfa = literal(string_literal(key))
        if self.names is not None and not self.names.accepts(string_literal(key)):
            return EMPTY
        return self.comp.tokens.pair(key_dfa, self.value_for(key))

    def extra_pair(self) -> Dfa:
        pats = list(self.patterns.items())
        alternatives = []
        for r in range(len(pats) + 1):
            for chosen in combinations(range(len(pats)), r):
                contents = [pattern_content(pats[i][0]) for i in chosen]
                others = [pattern_content(pats[i][0]) for i in range(len(pats)) if i not in chosen]
                content = difference(intersect(any_content(), *contents), *others)
                schemas = [pats[i][1] for i in chosen] or [self.additional]
                value = intersect(*(self.comp.compile(s, self.level + 1, self.exact) for s in schemas))
                if value.is_empty() or content.is_empty():
                    continue
                keys = difference(encode_content(content), literals_dfa(self.named))
                if self.names is not None:
                    keys = intersect(keys, self.names)
                alternatives.append(self.comp.tokens.pair(keys, value))
        return union(*alternatives)

    # ----------------------------------------------------------------- automaton
    def _inc(self, count: int) -> int | None:
        if self.max_props is not None:
            return count + 1 if count + 1 <= self.max_props else None
        return min(count + 1, max(self.min_props, 1))

    def _final(self, count: int, mask: int) -> bool:
        if count < self.min_props:
            return False
        seen = {k for i, k in enumerate(self.tracked) if mask >> i & 1}
        if any(k in self.tracked and k not in seen for k in self.required):
            return False
        return all(not (k in seen) or set(v) <= seen for k, v in self.deps.items())

    def body(self) -> Dfa:
        comma = self.comp.tokens.comma
        fixed_pairs = [self.pair_for(k) for k in self.fixed]
        tracked_pairs = [self.pair_for(k) for k in self.tracked]
        extra = self.extra_pair()
        items = {}

        def item(pair: Dfa, first: bool) -> Dfa:
            key = (id(pair), first)
            if key not in items:
                items[key] = pair if first else concat(comma, pair)
            return items[key]

        nfa = Nfa()
        nodes: dict = {}
        work: list = []

        def node(key) -> int:
            if key not in nodes:
                nodes[key] = nfa.add_state()
                work.append(key)
            return nodes[key]

        def link(src: int, pair: Dfa, count: int, dst_key) -> None:
            nxt = self._inc(count)
            if nxt is None or pair.is_empty():
                return
            s, fs = nfa.embed(item(pair, count == 0))
            nfa.add_eps(src, s)
            dst = node(dst_key(nxt))
            for f in fs:
                nfa.add_eps(f, dst)

        start = node(("f", 0, 0))
        while work:
            key = work.pop()
            src = nodes[key]
            if key[0] == "f":
                _, i, count = key
                if i == len(self.fixed):
                    nfa.add_eps(src, node(("x", count, 0)))
                    continue
                if self.fixed[i] not in self.required:
                    nfa.add_eps(src, node(("f", i + 1, count)))
                link(src, fixed_pairs[i], count, lambda c, i=i: ("f", i + 1, c))
            else:
                _, count, mask = key
                if self._final(count, mask):
                    nfa.finals.add(src)
                for j, pair in enumerate(tracked_pairs):
                    if not mask >> j & 1:
                        link(src, pair, count, lambda c, j=j, mask=mask: ("x", c, mask | 1 << j))
                link(src, extra, count, lambda c, mask=mask: ("x", c, mask))
        return nfa.determinize(start)
