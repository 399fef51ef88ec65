"""Object schemas as DFAs: properties (in schema order), required, additionalProperties,
patternProperties, propertyNames, dependentRequired and min/maxProperties.

Keys declared in `properties` come first, in the schema's order; every other key (extra keys,
required keys without a `properties` entry, keys named by dependentRequired) follows in any
order. In exact mode (used under `not`/`oneOf`/`if`) every named key may appear in any order, so
the language is exactly the set of valid objects (without duplicate keys).
"""

from __future__ import annotations

from sgl_runtime.constrained.automata import Dfa, literal
from sgl_runtime.constrained.automata_ops import Nfa, concat, difference, intersect
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.strings import (
    any_content,
    encode_content,
    literals_dfa,
    pattern_content,
    string_dfa,
    string_literal,
)
from sgl_runtime.constrained.json_schema.values import EXACT, FREE_ORDER, count_keyword

MAX_TRACKED_KEYS = 8  # exact mode: keys accepted in any order (2**n seen-sets)
MAX_FREE_ORDER_KEYS = 4  # normal mode: beyond this, undeclared required keys go in `required` order
MAX_PATTERN_PROPERTIES = 32
MAX_PATTERN_CELLS = 64  # ways an undeclared key can meet the patterns (each a key class of its own)
TOO_MANY_TRACKED = f"object: more than {MAX_TRACKED_KEYS} keys must be accepted in any order"  # a size refusal
KEYS_NOT_REGULAR = "undeclared keys"  # a refusal of the automaton that the grammar form takes over


def is_keys_refusal(exc: ConstraintError) -> bool:
    """Whether a flat compile refused undeclared keys that must not repeat (unique_grammar.track_keys)."""
    return str(exc).startswith(KEYS_NOT_REGULAR)


def object_dfa(comp, schema: dict, level: int, mode: int) -> Dfa:
    """The compact serialisations of objects valid under the object keywords of `schema`."""
    spec = _ObjectSpec(comp, schema, level, mode)
    return spec.body()


def _get(schema: dict, key: str, kind, default):
    value = schema.get(key, default)
    if not isinstance(value, kind):
        raise ConstraintError(f"{key}: invalid value {value!r}")
    return value


class _ObjectSpec:
    """The object keywords of `schema`, or of all of a list of schemas (their conjunction: each
    key's value must satisfy what every one of them says about that key)."""

    def __init__(self, comp, schema: dict | list[dict], level: int, mode: int) -> None:
        self.comp, self.level, self.mode = comp, level, mode
        exact = mode == EXACT
        conjuncts = schema if isinstance(schema, list) else [schema]
        # per conjunct: (properties, patternProperties, additionalProperties)
        self.parts = [
            (
                _get(c, "properties", dict, {}),
                _get(c, "patternProperties", dict, {}),
                c.get("additionalProperties", True),
            )
            for c in conjuncts
        ]
        self.props: dict = {}  # every declared key, in the order of its first declaration
        for props, _, _ in self.parts:
            for key, value in props.items():
                self.props.setdefault(key, value)
        self.required = list(dict.fromkeys(k for c in conjuncts for k in _get(c, "required", list, [])))
        self.deps: dict = {}
        for c in conjuncts:
            for key, needs in _get(c, "dependentRequired", dict, {}).items():
                if not isinstance(needs, list) or not all(isinstance(x, str) for x in needs):
                    raise ConstraintError("dependentRequired: each value must be a list of property names")
                self.deps[key] = list(dict.fromkeys(self.deps.get(key, []) + needs))
        if not all(isinstance(k, str) for k in self.required):
            raise ConstraintError("required: expected a list of property names")
        self.min_props = max(count_keyword(c, "minProperties", 0) for c in conjuncts)
        bounds = [count_keyword(c, "maxProperties", None) for c in conjuncts]
        self.max_props = min((b for b in bounds if b is not None), default=None)
        names = [c["propertyNames"] for c in conjuncts if "propertyNames" in c]
        self.names = None
        if names:
            self.names = intersect(*(comp.compile(n, level + 1, mode) for n in names), string_dfa())
        if sum(len(patterns) for _, patterns, _ in self.parts) > MAX_PATTERN_PROPERTIES:
            raise ConstraintError(f"patternProperties: at most {MAX_PATTERN_PROPERTIES} patterns are supported")
        dep_keys = set(self.deps) | {k for v in self.deps.values() for k in v}
        named = list(self.props) + [k for k in self.required + sorted(dep_keys) if k not in self.props]
        self.named = list(dict.fromkeys(named))
        self.tracked = [k for k in self.named if mode >= FREE_ORDER or k not in self.props or k in dep_keys]
        if not exact and len(self.tracked) > MAX_FREE_ORDER_KEYS:
            self.tracked = [k for k in self.tracked if k in dep_keys]
        self.fixed = [k for k in self.named if k not in self.tracked]
        if len(self.tracked) > MAX_TRACKED_KEYS:
            raise ConstraintError(TOO_MANY_TRACKED)

    # ----------------------------------------------------------------- pieces
    def value_parts(self, key: str) -> list:
        """The schemas the value of the named `key` must satisfy: per conjunct, its `properties`
        entry and the patternProperties matching the key, or else its additionalProperties."""
        out = []
        for props, patterns, additional in self.parts:
            matched = [s for p, s in patterns.items() if pattern_content(p).accepts(key)]
            out += ([props[key]] if key in props else []) + matched
            if key not in props and not matched:
                out.append(additional)
        kept = [s for s in out if s is not True]
        return kept or [True]

    def value_for(self, key: str) -> Dfa:
        return intersect(*(self.comp.compile(p, self.level + 1, self.mode) for p in self.value_parts(key)))

    def pair_for(self, key: str) -> list[tuple[Dfa, Dfa]]:
        """[(key DFA, value DFA)]: the ways a pair for the named key can be written."""
        if self.names is not None and not self.names.accepts(string_literal(key)):
            return []
        value = self.value_for(key)
        return [] if value.is_empty() else [(literal(string_literal(key)), value)]

    def extra_key_classes(self):
        """Each way an undeclared key can meet the patternProperties: (chosen pattern indices, the schemas its
        value must satisfy, the key contents matching exactly those patterns), for the ways some key takes
        (the cells of the patterns' Venn diagram that are not empty: one per pattern when they are disjoint)."""
        pats = [(n, p, s) for n, (_, patterns, _) in enumerate(self.parts) for p, s in patterns.items()]
        cells = [((), any_content())]
        for i, (_, pattern, _) in enumerate(pats):
            content = pattern_content(pattern)
            split = []
            for chosen, cell in cells:
                split += [((*chosen, i), intersect(cell, content)), (chosen, difference(cell, content))]
            cells = [(chosen, cell) for chosen, cell in split if not cell.is_empty()]
            if len(cells) > MAX_PATTERN_CELLS:
                raise ConstraintError(f"patternProperties: the patterns overlap in more than {MAX_PATTERN_CELLS} ways")
        for chosen, content in cells:
            schemas = []
            for n, (_, _, additional) in enumerate(self.parts):
                mine = [pats[i][2] for i in chosen if pats[i][0] == n]
                schemas += mine or [additional]
            yield chosen, [s for s in schemas if s is not True] or [True], content

    def extra_keys(self, content: Dfa) -> Dfa:
        """The quoted keys with these contents that no `properties` entry names, within propertyNames."""
        keys = difference(encode_content(content), literals_dfa(self.named))
        return keys if self.names is None else intersect(keys, self.names)

    def extra_pairs(self) -> list[tuple[Dfa, Dfa]]:
        alternatives = []
        for _, schemas, content in self.extra_key_classes():
            value = intersect(*(self.comp.compile(s, self.level + 1, self.mode) for s in schemas))
            if value.is_empty() or content.is_empty():
                continue
            keys = self.extra_keys(content)
            if not keys.is_empty():
                alternatives.append((keys, value))
        return alternatives

    def undeclared_count(self) -> bool:
        """Whether minProperties may need undeclared keys, which then count once each."""
        return self.min_props >= 2 and self.min_props > len(self.required)

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
        return all(k not in seen or set(v) <= seen for k, v in self.deps.items())

    def body(self) -> Dfa:
        return _BodyBuilder(self).build()


class _BodyBuilder:
    """The NFA over (section, count, seen-mask) nodes; each pair is `[,] key :` then one shared
    copy of the value automaton per (destination node, value)."""

    def __init__(self, spec: _ObjectSpec) -> None:
        self.spec = spec
        self.tokens = spec.comp.tokens
        self.nfa = Nfa()
        self.nodes: dict = {}
        self.work: list = []
        self.prefixes: dict = {}
        self.value_entries: dict = {}

    def node(self, key) -> int:
        if key not in self.nodes:
            self.nodes[key] = self.nfa.add_state()
            self.work.append(key)
        return self.nodes[key]

    def prefix(self, keys: Dfa, first: bool) -> Dfa:
        k = (id(keys), first)
        if k not in self.prefixes:
            parts = ([] if first else [self.tokens.comma]) + [keys, self.tokens.colon]
            self.prefixes[k] = (keys, concat(*parts))
        return self.prefixes[k][1]

    def value_entry(self, value: Dfa, dst_key) -> int:
        k = (id(value), dst_key)
        if k not in self.value_entries:
            s, fs = self.nfa.embed(value)
            dst = self.node(dst_key)
            for f in fs:
                self.nfa.add_eps(f, dst)
            self.value_entries[k] = (value, s)
        return self.value_entries[k][1]

    def link(self, src: int, pairs: list, count: int, dst_key) -> None:
        nxt = self.spec._inc(count)
        if nxt is None:
            return
        for keys, value in pairs:
            s, fs = self.nfa.embed(self.prefix(keys, count == 0))
            self.nfa.add_eps(src, s)
            entry = self.value_entry(value, dst_key(nxt))
            for f in fs:
                self.nfa.add_eps(f, entry)

    def build(self) -> Dfa:
        spec = self.spec
        fixed_pairs = [spec.pair_for(k) for k in spec.fixed]
        tracked_pairs = [spec.pair_for(k) for k in spec.tracked]
        extra = spec.extra_pairs()
        if extra and not spec.comp.repeated_keys and (spec.comp.keys_tracked or spec.undeclared_count()):
            raise ConstraintError(
                f"{KEYS_NOT_REGULAR}: must not repeat where they count (minProperties {spec.min_props}, or "
                "uniqueItems over objects), which one automaton cannot track"
            )
        start = self.node(("f", 0, 0))
        while self.work:
            key = self.work.pop()
            src = self.nodes[key]
            if key[0] == "f":
                _, i, count = key
                if i == len(spec.fixed):
                    self.nfa.add_eps(src, self.node(("x", count, 0)))
                    continue
                if spec.fixed[i] not in spec.required:
                    self.nfa.add_eps(src, self.node(("f", i + 1, count)))
                self.link(src, fixed_pairs[i], count, lambda c, i=i: ("f", i + 1, c))
            else:
                _, count, mask = key
                if spec._final(count, mask):
                    self.nfa.finals.add(src)
                for j, pairs in enumerate(tracked_pairs):
                    if not mask >> j & 1:
                        self.link(src, pairs, count, lambda c, j=j, mask=mask: ("x", c, mask | 1 << j))
                self.link(src, extra, count, lambda c, mask=mask: ("x", c, mask))
        return self.nfa.determinize_between(start, self.tokens.lbrace, self.tokens.rbrace)
