"""The rules of the grammar form (grammar_form.py): free-form values, objects and arrays.

Member lists are left-recursive (the parser stack stays flat however long the object or array),
one nonterminal per state of the member automaton: for objects (next declared key, member count,
keys seen) as in the flat compiler's objects.py, for arrays the item position.
"""

from __future__ import annotations

from sgl_runtime.constrained.automata import literal
from sgl_runtime.constrained.automata_ops import union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.frames import CLOSE, KEY, KEYS, OPEN, OPEN_VALUES, Opener
from sgl_runtime.constrained.json_schema.arrays import SPELLED_POSITIONS
from sgl_runtime.constrained.json_schema.if_split import split_condition
from sgl_runtime.constrained.json_schema.numbers import number_universe
from sgl_runtime.constrained.json_schema.objects import _ObjectSpec
from sgl_runtime.constrained.json_schema.shapes import ARRAY, CATEGORIES, OBJECT, SCALAR
from sgl_runtime.constrained.json_schema.strings import (
    string_dfa,
    string_literal,
)
from sgl_runtime.constrained.json_schema.unique_grammar import mark_tracked
from sgl_runtime.constrained.json_schema.value_tests import ReadsInside, ValueTestsRefused, value_options
from sgl_runtime.constrained.json_schema.values import count_keyword

MAX_ARRAY_POSITIONS = 512


def free_form(b, c: str) -> str:
    """Any JSON value of category `c`, nested to any depth."""
    if "ff_value" not in b.rules:
        scalars = union(literal("null"), literal("true"), literal("false"), number_universe(), string_dfa())
        scalar = b.terminal(scalars, ("free", SCALAR))
        lbrace, rbrace, lbracket, rbracket = (b.punct(p) for p in ("LBRACE", "RBRACE", "LBRACKET", "RBRACKET"))
        first, nxt = b.key(string_dfa(), True, ("free",)), b.key(string_dfa(), False, ("free",))
        b.rule([["ff_object"], ["ff_array"], [scalar]], "ff_value")
        if b.track_keys:  # no key twice (unique_grammar.py, track_keys)
            opened, at = [lbrace, key_rules(b)[0]], key_rules(b)[1]
            b.rule([[*opened, rbrace], [*opened, "ff_members", rbrace]], "ff_object")
            b.rule([[at, first, "ff_value"], ["ff_members", at, nxt, "ff_value"]], "ff_members")
            b.unique["ff_object"] = CLOSE
        else:
            b.rule([[lbrace, rbrace], [lbrace, "ff_members", rbrace]], "ff_object")
            b.rule([[first, "ff_value"], ["ff_members", nxt, "ff_value"]], "ff_members")
        b.rule([[lbracket, rbracket], [lbracket, "ff_items", rbracket]], "ff_array")
        b.rule([["ff_value"], ["ff_items", b.punct("COMMA"), "ff_value"]], "ff_items")
        b.free_scalar = scalar
    return {OBJECT: "ff_object", ARRAY: "ff_array", SCALAR: b.free_scalar}[c]


# ---------------------------------------------------------------------- objects
MAX_CONDITION_BITS = 12


def object_rule(b, schema: dict | list[dict], condition=None, mode: int | None = None) -> str | None:
    """`{` members `}` for the object keywords of `schema` (or of all of a list of schemas:
    object_merge.py) (None: no valid object); `condition`: (predicate over the set of present keys
    and value facts, the keys it reads, its value tests {fact: (key, subschema)}: presence.py),
    checked where the object closes."""
    try:
        return _object_rule(b, schema, condition, mode)
    except ReadsInside:  # a value test reads inside a container: split on the `if` instead, if it can be
        split = split_condition(b, schema) if isinstance(schema, dict) else False
        if split is False:
            raise
        return split


def _object_rule(b, schema: dict | list[dict], condition, mode: int | None) -> str | None:
    spec = _ObjectSpec(b.comp, schema, 0, b.mode if mode is None else mode)
    fixed_bits: dict = {}
    fact_bits: dict = {}
    if condition is not None:
        for key in sorted(condition[1] - set(spec.named)):  # keys to see: tracked like undeclared required keys
            spec.named.append(key)
            spec.tracked.append(key)
        bit = 1 << len(spec.tracked)
        for key in spec.fixed:
            if key in condition[1]:
                fixed_bits[key], bit = bit, bit << 1
        for fact in condition[2]:
            fact_bits[fact], bit = bit, bit << 1
        if bit > 1 << MAX_CONDITION_BITS:
            refusal = ValueTestsRefused if condition[2] else ConstraintError  # the former: retried without tests
            raise refusal(f"object: more than {MAX_CONDITION_BITS} keys and value tests decide its conditions")
    values = {k: _named_options(b, spec, k, condition, fact_bits) for k in spec.named}
    extras = _extra_pairs(b, spec)
    builder = _Members(b, spec, values, extras, condition, fixed_bits, fact_bits)
    return builder.build()


def _named_options(b, spec, key: str, condition, fact_bits: dict) -> list:
    """[(value symbol, fact bits)] for the values of a named key: one, or one per outcome of the
    condition's tests of that key (value_tests.py)."""
    if spec.names is not None and not spec.names.accepts(string_literal(key)):
        return []
    value = b.all_of(spec.value_parts(key))
    facts = [(fact, sub) for fact, (k, sub) in (condition[2].items() if condition else ()) if k == key]
    if facts:
        return value_options(b, key, value, facts, fact_bits)
    symbol = b.node(value)
    return [] if symbol is None else [(symbol, 0)]


def _extra_pairs(b, spec) -> list[tuple]:
    """[(key terminal ident, key DFA, value symbol)] for keys no `properties` entry names."""
    out = []
    for chosen, schemas, content in spec.extra_key_classes():
        if content.is_empty():
            continue
        value = b.node(b.all_of(schemas))
        if value is None:
            continue
        keys = spec.extra_keys(content)
        if not keys.is_empty():
            out.append(((spec, chosen), keys, value))  # spec itself, not id(spec): the key keeps it alive, so no
            # later object can reuse its id and be handed this one's key terminal
    return out


class _Members:
    """Left-linear rules over the member automaton's states (i, count, seen mask): i is the index
    of the next declared key that may come (`spec.fixed`), all of them written before the others."""

    def __init__(self, b, spec, values: dict, extras: list, condition=None, fixed_bits=None, fact_bits=None) -> None:
        self.b, self.spec, self.values, self.extras = b, spec, values, extras  # values: key -> [(symbol, fact bits)]
        self.condition, self.fixed_bits, self.fact_bits = condition, fixed_bits or {}, fact_bits or {}
        self.names: dict = {}
        self.work: list = []
        self.rules: dict = {}

    def state(self, key) -> str:
        if key not in self.names:
            self.names[key] = self.b.name("m")
            self.rules[self.names[key]] = []
            self.work.append(key)
        return self.names[key]

    def optional_from(self, i: int) -> bool:
        return all(k not in self.spec.required for k in self.spec.fixed[i:])

    def edges(self, i: int, count: int, mask: int) -> list[tuple]:
        """[(key terminal, value symbol, next state)] from state (i, count, mask), where the
        member automaton may skip optional declared keys."""
        spec, b = self.spec, self.b
        nxt = spec._inc(count)
        if nxt is None:
            return []
        first, out = count == 0 and i == 0 and mask == 0, []
        for j in range(i, len(spec.fixed)):
            key = spec.fixed[j]
            for value, bits in self.values[key]:
                out.append((b.named_key(key, first), value, (j + 1, nxt, mask | self.fixed_bits.get(key, 0) | bits)))
            if key in spec.required or not first:
                break  # from a non-initial state, later keys are reached through the skip rules
        if not self.optional_from(i) or (not first and i < len(spec.fixed)):
            return out
        for t, key in enumerate(spec.tracked):
            for value, bits in self.values[key] if not mask >> t & 1 else ():
                out.append((b.named_key(key, first), value, (len(spec.fixed), nxt, mask | 1 << t | bits)))
        for ident, keys, value in self.extras:
            out.append((b.key(keys, first, ident), value, (len(spec.fixed), nxt, mask)))
        return out

    def final(self, count: int, mask: int) -> bool:
        if not self.spec._final(count, mask):
            return False
        if self.condition is None:
            return True
        present = {k for t, k in enumerate(self.spec.tracked) if mask >> t & 1}
        present |= {k for k, bit in self.fixed_bits.items() if mask & bit}
        present |= {fact for fact, bit in self.fact_bits.items() if mask & bit}
        return self.condition[0](frozenset(present))

    def build(self) -> str | None:
        b, spec = self.b, self.spec
        lbrace, rbrace = b.punct("LBRACE"), b.punct("RBRACE")
        opened, at = ([lbrace, key_rules(b)[0]], [key_rules(b)[1]]) if b.track_keys else ([lbrace], [])
        alternatives = []
        if self.optional_from(0) and self.final(0, 0):
            alternatives.append([*opened, rbrace])
        for term, value, dst in self.edges(0, 0, 0):
            self.rules[self.state(dst)].append([*at, term, value])
        while self.work:
            i, count, mask = key = self.work.pop()
            name = self.names[key]
            for term, value, dst in self.edges(i, count, mask):
                self.rules[self.state(dst)].append([name, *at, term, value])
            if i < len(spec.fixed) and spec.fixed[i] not in spec.required:
                self.rules[self.state((i + 1, count, mask))].append([name])  # skip the optional key
            if i == len(spec.fixed) and self.final(count, mask):
                alternatives.append([*opened, name, rbrace])
        if not alternatives:
            return None
        for name, alts in self.rules.items():
            if alts:
                b.rule(alts, name)
        name = b.rule(alternatives)
        if b.track_keys:
            b.unique[name] = CLOSE
        return name


def key_rules(b) -> tuple[str, str]:
    """The two empty rules of objects whose keys the engine tracks (grammar/frames.py): one right
    after `{` (KEYS: a new object), one right before each key token (KEY), shared by every object."""
    if "k_open" not in b.rules:
        b.rule([[]], "k_open")
        b.rule([[]], "k_at")
        b.unique["k_open"], b.unique["k_at"] = KEYS, KEY
    return "k_open", "k_at"


# ---------------------------------------------------------------------- arrays
def array_rule(b, schema: dict) -> str | None:
    """`[` items `]` for the array keywords of `schema` (None: no valid array)."""
    if "contains" in schema:
        raise ConstraintError("contains: not supported on arrays too large for one automaton (grammar form)")
    prefix = schema.get("prefixItems", [])
    if not isinstance(prefix, list):
        raise ConstraintError("prefixItems: expected a list of schemas")
    min_items = count_keyword(schema, "minItems", 0)
    max_items = count_keyword(schema, "maxItems", None)
    unique = schema.get("uniqueItems") is True and not (max_items is not None and max_items <= 1)
    unique_kind = b.unique_items([*prefix, schema.get("items", True)]) if unique else None  # OPEN, OPEN_VALUES, None
    elements = [b.node(s) for s in prefix]
    rest = b.node(schema.get("items", True), CATEGORIES)
    separator = [b.punct("COMMA")]
    limit = next((p for p, e in enumerate(elements) if e is None), len(prefix) if rest is None else None)
    if limit is not None:
        max_items = limit if max_items is None else min(max_items, limit)
    top = max_items if max_items is not None else max(len(prefix), min_items, 1)
    high = None  # maxItems the engine counts (grammar/frames.py), beyond positions spelled out as rules
    if top > SPELLED_POSITIONS and b.tokens.ws is None and max(len(prefix), min_items) <= MAX_ARRAY_POSITIONS:
        high, max_items, top = max_items, None, max(len(prefix), min_items, 1)
    if top > MAX_ARRAY_POSITIONS:
        raise ConstraintError(f"minItems/maxItems: more than {MAX_ARRAY_POSITIONS} positions in the grammar form")
    if min_items > (top if high is None else high):
        return None
    tracked = bool(unique_kind) or high is not None
    item_rules: list = []  # reduced as each item ends
    if tracked and rest is not None:
        rest = b.rule([[rest]])
        item_rules.append(rest)
    if tracked:  # every item counts, those of prefixItems too
        elements = [e if e is None else b.rule([[e]]) for e in elements]
        item_rules += [e for e in elements if e is not None]

    def element(p: int) -> str:
        return elements[p] if p < len(prefix) else rest

    lbracket, rbracket = b.punct("LBRACKET"), b.punct("RBRACKET")
    names = [""] + [b.name("a") for _ in range(top)]
    rules: dict = {names[1]: [[element(0)]]} if top else {}
    for p in range(1, top):
        rules[names[p + 1]] = [[names[p], *separator, element(p)]]
    if max_items is None:
        rules[names[top]].append([names[top], *separator, element(top)])
    for name, alts in rules.items():
        b.rule(alts, name)
    opener = [lbracket]
    if item_rules:
        opener.append(b.rule([[]]))  # empty, reduced right after `[`: a new array of tracked items
    alternatives = [[*opener, rbracket]] if min_items == 0 else []
    alternatives += [[*opener, names[p], rbracket] for p in range(max(min_items, 1), top + 1)]
    if not alternatives:
        return None
    name = b.rule(alternatives)
    if item_rules:
        compared = {OPEN: "text", OPEN_VALUES: "values"}.get(unique_kind or "")
        kind = unique_kind if high is None else Opener(compared, high)
        mark_tracked(b, kind, name, opener[1], item_rules)
    return name
