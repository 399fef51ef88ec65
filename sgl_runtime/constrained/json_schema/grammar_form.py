"""JSON Schema as a pushdown grammar: structure as grammar rules, leaves as flat automata.

`GrammarBuilder(comp, mode).build(schema) -> SchemaGrammar` (called by `language.schema_to_grammar`) accepts the
same serialisation as the flat compiler (compact JSON or the configured whitespace, declared keys in `properties`
order, then the other keys, canonical strings and numbers) with no depth bound. Every subschema whose flat automaton
is exact (no free-form value, no recursive `$ref`: `shapes.closed`) and small is ONE terminal of the grammar, its
byte DFA injected as that terminal's automaton; objects, arrays, `$ref` recursion and free-form values that are not
become rules. A value position offers at most one symbol per category (object, array, scalar), so terminals that
could start there are disjoint, except for anyOf/oneOf over object alternatives (object_union.py), whose grammar
`build` checks; object keys are tokens `"key":` (with the comma before them after the first member), declared keys
and the other keys of one object disjoint. The engine runs the grammar with default reductions (grammar/parser.py),
so each token is lexed with the terminals of its own position only.

Objects and arrays are read through their schema narrowed to that category (narrow.py), and
constrained in several places as one conjunction (object_merge.py, array_merge.py). What the grammar
form cannot say exactly is refused with a ConstraintError naming the keyword: in-place applicators
(`allOf`, `anyOf`, `oneOf`, `not`, `if`, `dependentSchemas`, unevaluated*) that combine several
constraints on objects or arrays too large for one automaton otherwise (object alternatives of
anyOf/oneOf the parser can tell apart excepted), `contains` and `$dynamicRef` there.
"""

from __future__ import annotations

from typing import Optional

from sgl_runtime.constrained.automata import Dfa, literal, work_budget
from sgl_runtime.constrained.automata_ops import concat, intersect
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.counted import CountedDFA
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.array_merge import merged_array
from sgl_runtime.constrained.json_schema.arrays import COUNTED_BY_GRAMMAR
from sgl_runtime.constrained.json_schema.if_split import split_condition
from sgl_runtime.constrained.json_schema.long_strings import NOT_COUNTED, counted_leaf, holds_long_string
from sgl_runtime.constrained.json_schema.narrow import narrowed
from sgl_runtime.constrained.json_schema.object_merge import NOT_MERGED, merged_object
from sgl_runtime.constrained.json_schema.object_union import object_union
from sgl_runtime.constrained.json_schema.objects import KEYS_NOT_REGULAR, TOO_MANY_TRACKED
from sgl_runtime.constrained.json_schema.presence import presence_condition
from sgl_runtime.constrained.json_schema.schema_grammar import SchemaGrammar
from sgl_runtime.constrained.json_schema.shapes import (
    ARRAY,
    ARRAY_KEYWORDS,
    CATEGORIES,
    DYNAMIC,
    OBJECT,
    OBJECT_KEYWORDS,
    SCALAR,
    SCALAR_KEYWORDS,
    Shapes,
    first_char_dfa,
    literals,
    members,
    types_of,
    whole_categories,
)
from sgl_runtime.constrained.json_schema.strings import string_dfa, string_literal
from sgl_runtime.constrained.json_schema.value_tests import ValueTestsRefused

LEAF_WORK_STATES = 40_000  # automaton states one leaf's flat compile may build
LEAF_FIRST_STATES = 4_000  # ... on a first build, where rules can take the leaf instead (objects, arrays)
LEAF_MAX_STATES = 6_000  # byte DFA states of one leaf terminal
LEAF_EXPANSION_STATES = 60_000  # byte states of a terminal's UTF-8 expansion, before minimisation
MAX_SYMBOLS = 60_000  # rules plus terminals of one grammar
# the size refusals of the flat compiler (automata.py, byte_dfa.py) and of this module
_TOO_BIG = (
    "JSON Schema too complex",
    "JSON Schema automaton too large",
    "constraint too large",
    "JSON Schema grammar",
    TOO_MANY_TRACKED,  # in exact mode (under oneOf, not, if): rules need no key order
)
_NOFLAT = object()
_COMPLEMENTS = {
    OBJECT: ("not", "if", "dependentSchemas", "unevaluatedProperties"),
    ARRAY: ("not", "if", "unevaluatedItems"),
}


def is_unique_refusal(exc: ConstraintError) -> bool:
    """Whether a flat compile refused what the grammar form does better: `uniqueItems`, undeclared
    keys that must not repeat, a long maxItems it counts (arrays.py)."""
    return str(exc).startswith(("uniqueItems", KEYS_NOT_REGULAR, COUNTED_BY_GRAMMAR))


def is_budget_error(exc: ConstraintError) -> bool:
    """Whether a flat compile failed on its size rather than on an unsupported keyword."""
    return str(exc).startswith(_TOO_BIG)


class GrammarBuilder:
    """Translates one schema document, compiling leaves with the flat compiler `comp`."""

    def __init__(self, comp, mode: int, leaf_budget: int = LEAF_WORK_STATES, first_budget: Optional[int] = None):
        """first_budget: see `leaf`; `cut_short` tells whether it cut a leaf short (then a build with
        the whole leaf_budget might succeed where this one failed)."""
        self.comp, self.mode, self.tokens = comp, mode, comp.tokens
        self.leaf_budget = leaf_budget
        self.first_budget = first_budget
        self.cut_short = False
        self.shapes = Shapes(comp.refs)
        comp.level_free = self.shapes.closed  # a leaf built inside a larger failed attempt is reused
        self.rules: dict[str, list[list[str]]] = {}
        self.terminals: dict[str, ByteDFA] = {}
        self.unique: dict[str, str] = {}  # the marked rules of unique arrays and tracked objects
        self.track_keys = False  # objects reject a key written twice (unique_grammar.track_keys)
        self.nodes: dict = {}
        self._pending: dict[str, bool] = {}
        self._terms: dict = {}
        self._by_content: dict = {}
        self._typeless: dict = {}
        self._all_of: dict = {}
        self._count = 0
        self.checks: list[str] = []  # what shares a position between rules (object_union.py, value_tests.py)
        self.value_tests_used = 0  # objects whose conditions became value tests (value_tests.py)
        self.condition_splits = 0  # `if`s split into passing and failing objects (if_split.py)
        self.distribute_first = False  # object_merge.py: anyOf/oneOf over objects as object rules first (a retry)

    # ------------------------------------------------------------------ output
    def build(self, schema) -> SchemaGrammar:
        from sgl_runtime.constrained.json_schema.grammar_rules import free_form  # noqa: F401 - warm import
        from sgl_runtime.constrained.json_schema.unique_grammar import track_keys

        self.track_keys = self.comp.keys_tracked = track_keys(self, schema)
        self.comp.counts_items = self.tokens.ws is None  # long arrays as rules, counted (grammar_rules.array_rule)
        root = self.node(schema)
        if root is None:
            raise ConstraintError("the json_schema constraint matches no value at all")
        lines = [f"start: {root}"]
        lines += [f"{name}: " + " | ".join(" ".join(alt) for alt in alts) for name, alts in self.rules.items()]
        lines += [f'{name}: "<{name}>"' for name in self.terminals]
        grammar = SchemaGrammar("\n".join(lines) + "\n", dict(self.terminals), dict(self.unique))
        if self.checks:
            grammar.check(self.checks)
        return grammar

    def name(self, prefix: str) -> str:
        self._count += 1
        if self._count > MAX_SYMBOLS:
            raise ConstraintError(f"JSON Schema grammar too large (more than {MAX_SYMBOLS} rules and terminals)")
        return f"{prefix}{self._count}"

    def rule(self, alternatives: list[list[str]], name: Optional[str] = None) -> str:
        name = name or self.name("r")
        self.rules[name] = alternatives
        return name

    def terminal(self, dfa: Dfa, key=None) -> str:
        """A terminal for `dfa` (the same `key` gives the same terminal)."""
        if key is not None and key in self._terms:
            return self._terms[key][0]
        if isinstance(dfa, CountedDFA):  # long strings (long_strings.py), shared by key only
            name = self.name("T")
            self.terminals[name] = dfa
            if key is not None:
                self._terms[key] = (name, dfa)
            return name
        byte_dfa = ByteDFA.from_dfa(dfa, max_states=LEAF_EXPANSION_STATES)
        content = (byte_dfa.initial, byte_dfa.transitions.tobytes(), byte_dfa.accepting.tobytes())
        name = self._by_content.get(content)  # one terminal per language: equal positions share lexer contexts
        if name is None:
            name = self._by_content[content] = self.name("T")
            self.terminals[name] = byte_dfa
        if key is not None:
            self._terms[key] = (name, dfa)
        return name

    def punct(self, which: str) -> str:
        """LBRACE, RBRACE, LBRACKET, RBRACKET or COMMA, with the configured whitespace."""
        if which not in self.terminals:
            dfa = getattr(self.tokens, which.lower())
            self.terminals[which] = ByteDFA.from_dfa(dfa)
        return which

    def key(self, keys: Dfa, first: bool, ident) -> str:
        """The token `[,] key :` for the key language `keys` (`ident` names it for sharing; the
        concatenation, costly for large key languages, is built once)."""
        if ("key", ident, first) in self._terms:
            return self._terms["key", ident, first][0]
        parts = ([] if first else [self.tokens.comma]) + [keys, self.tokens.colon]
        return self.terminal(concat(*parts), ("key", ident, first))

    def named_key(self, name: str, first: bool) -> str:
        return self.key(literal(string_literal(name)), first, ("name", name))

    # ------------------------------------------------------------------ nodes
    def node(self, schema, cats: frozenset = CATEGORIES) -> Optional[str]:
        """The symbol of `schema`'s values of categories `cats` (None: there are none)."""
        cats = cats & self.shapes.admits(schema)
        if not cats:
            return None
        key = (id(schema), cats)
        if key in self.nodes:
            found = self.nodes[key]
            if found in self._pending:
                self._pending[found] = True  # referenced from inside itself: stays a rule
            return found
        name = self.name("r")
        self.nodes[key] = name
        self._pending[name] = False
        try:
            alts = self._expand(schema, cats)
        finally:
            recursive = self._pending.pop(name)
        if not alts and not recursive:
            self.nodes[key] = None
            return None
        if len(alts) == 1 and not recursive:
            self.nodes[key] = alts[0]
            return alts[0]
        self.rule([[a] for a in alts] or [[self.never()]], name)
        return name

    def never(self) -> str:
        return self.terminal(Dfa(((),), frozenset()), ("never",))

    def _expand(self, schema, cats: frozenset) -> list[str]:
        from sgl_runtime.constrained.json_schema import grammar_rules

        if schema is True:
            return [grammar_rules.free_form(self, c) for c in (SCALAR, OBJECT, ARRAY) if c in cats]
        if self.shapes.closed(schema):
            leaf = self.leaf(schema, cats)
            if leaf is not _NOFLAT:
                return [leaf] if leaf is not None else []
        out = []
        if SCALAR in cats:
            scalars = self.leaf(self.shapes.scalars(schema), frozenset({SCALAR}))
            if scalars is _NOFLAT:
                raise ConstraintError(
                    f"JSON Schema too complex: the scalar values of one subschema need more than {self.leaf_budget} "
                    f"automaton states or {LEAF_MAX_STATES} DFA states (e.g. a large maxLength)"
                )
            if scalars is not None:
                out.append(scalars)
        for c in (OBJECT, ARRAY):
            if c in cats:
                symbol = self.container(schema, c)
                if symbol is not None:
                    out.append(symbol)
        return out

    def leaf(self, schema, cats: frozenset):
        """ONE terminal for the flat automaton of `schema` restricted to `cats`; None when that is
        empty, _NOFLAT when it is too large (the caller then builds rules): past `first_budget` when
        given and `cats` holds objects or arrays, else past `leaf_budget`."""
        if schema is False:
            return None
        cats = cats & self.shapes.admits(schema)
        if not cats:
            return None
        counted = counted_leaf(self, schema, cats)
        if counted is not NOT_COUNTED:
            return counted
        if cats - {SCALAR} and holds_long_string(self, schema):
            return _NOFLAT  # rules, whose string leaves are counted
        target = self._without_type(schema)
        budget = self.leaf_budget
        if self.first_budget is not None and cats - {SCALAR}:
            budget = min(budget, self.first_budget)
        try:
            with work_budget(budget):
                dfa = self.comp.compile(target, 0, self.mode)
                if cats != CATEGORIES:
                    dfa = intersect(dfa, first_char_dfa(cats))
            if dfa.is_empty():
                return None
            if dfa.num_states > LEAF_MAX_STATES:
                return _NOFLAT
            return self.terminal(dfa)
        except ConstraintError as exc:
            if is_budget_error(exc) or is_unique_refusal(exc):
                self.cut_short |= budget < self.leaf_budget and is_budget_error(exc)
                return _NOFLAT  # rules; arrays of unique items there: see unique_items
            raise

    def unique_items(self, schemas: list) -> Optional[str]:
        from sgl_runtime.constrained.json_schema.unique_grammar import unique_items

        return unique_items(self, schemas)

    def _without_type(self, schema):
        """`schema` without its `type` when it has no keyword of its own (only applicators): the
        flat compiler then leaves its own free-form part out, and `leaf` restricts the categories."""
        if not isinstance(schema, dict) or "type" not in schema:
            return schema
        own = [k for k in schema if k in OBJECT_KEYWORDS or k in ARRAY_KEYWORDS]
        if own or not any(k in schema for k in ("$ref", "allOf", "anyOf", "oneOf")) or literals(schema) is not None:
            return schema
        if any(k in schema for k in SCALAR_KEYWORDS) or not whole_categories(types_of(schema)):
            return schema
        if id(schema) not in self._typeless:
            copy = {k: v for k, v in schema.items() if k != "type"}
            self.comp.refs.base_of[id(copy)] = self.comp.refs.base(schema)
            self._typeless[id(schema)] = (schema, copy)
        return self._typeless[id(schema)][1]

    def all_of(self, schemas: list):
        """One schema for the intersection of `schemas` (the same list gives the same object)."""
        if len(schemas) == 1:
            return schemas[0]
        key = tuple(id(s) for s in schemas)
        if key not in self._all_of:
            self._all_of[key] = (schemas, self.shapes.keep({"allOf": list(schemas)}))
        return self._all_of[key][1]

    # ------------------------------------------------------------------ containers
    def container(self, schema: dict, c: str) -> Optional[str]:
        """The symbol of `schema`'s objects (c = OBJECT) or arrays (ARRAY), as rules."""
        from sgl_runtime.constrained.json_schema import grammar_rules

        narrow = narrowed(self, schema, c)  # without what says nothing of c's values (narrow.py)
        if narrow is not schema:
            return self.node(narrow, frozenset({c}))
        own_keywords = OBJECT_KEYWORDS if c == OBJECT else ARRAY_KEYWORDS
        parts: list[str] = [k for k in own_keywords if k in schema][:1]
        parts += [k for k in (*_COMPLEMENTS[c], *DYNAMIC, "$ref", "anyOf", "oneOf", "enum", "const") if k in schema]
        nontrivial = [m for m in members(schema, "allOf") if not self.trivial(m, c)]
        parts += ["allOf"] if nontrivial else []
        if not parts:
            return grammar_rules.free_form(self, c)
        applicators = [p for p in parts if p not in own_keywords]
        condition = presence_condition(self, schema, applicators, c)
        untested = ""
        if condition is not None and c == OBJECT and condition[2] and self.distribute_first:
            merged = merged_object(self, schema)  # anyOf/oneOf branches as object rules of their own
            if merged is not NOT_MERGED:
                return merged
        if condition is not None and c == OBJECT:
            try:
                symbol = grammar_rules.object_rule(self, schema, condition)
            except ValueTestsRefused as exc:  # the rules below may still do without value tests
                condition, untested = None, f" ({exc})"
            else:
                if condition[2]:
                    self.checks.append(f"{'/'.join(applicators)} (value tests)")
                    self.value_tests_used += 1
                return symbol
        if condition is not None:  # on arrays such conditions are constant
            if not condition[0](frozenset()):
                return None
            own = any(k in schema for k in own_keywords)
            return grammar_rules.array_rule(self, schema) if own else grammar_rules.free_form(self, c)
        if len(parts) > 1 or len(nontrivial) > 1 or parts[0] in _COMPLEMENTS[c]:
            merged = (merged_object if c == OBJECT else merged_array)(self, schema)
            if merged is not NOT_MERGED:
                return merged
        if len(parts) > 1:
            raise ConstraintError(
                f"{' and '.join(parts)}: the grammar form cannot combine these constraints on {c}s "
                f"(the subschema is too large for one automaton){untested}"
            )
        part = parts[0]
        cats = frozenset({c})
        if part in own_keywords:
            return grammar_rules.object_rule(self, schema) if c == OBJECT else grammar_rules.array_rule(self, schema)
        if part == "$ref":
            return self.node(self.shapes.target(schema), cats)
        if part == "allOf":
            if len(nontrivial) == 1:
                return self.node(nontrivial[0], cats)
            raise ConstraintError(
                f"allOf: {len(nontrivial)} subschemas constrain {c}s and together are too large for one automaton "
                "(the grammar form cannot intersect rules)"
            )
        if part in ("anyOf", "oneOf"):
            branches = [b for b in members(schema, part) if c in self.shapes.admits(b)]
            if len(branches) <= 1:
                return self.node(branches[0], cats) if branches else None
            if all(self.shapes.closed(b) for b in branches):
                leaf = self.leaf(self.shapes.keep({part: branches}), cats)
                if leaf is not _NOFLAT:
                    return leaf
            if c == OBJECT:
                return object_union(self, part, branches)
            raise ConstraintError(
                f"{part}: {len(branches)} alternatives allow {c}s and are too large to merge into one automaton "
                "(the grammar form unites object alternatives only)"
            )
        if part in DYNAMIC:
            raise ConstraintError(f"{part}: not supported where the schema needs the grammar form")
        split = split_condition(self, schema) if part == "if" and c == OBJECT else False  # passing / failing
        if split is not False:
            return split
        raise ConstraintError(
            f"{part}: not supported on {c}s too large for one automaton (the grammar form cannot complement rules)"
        )

    def trivial(self, schema, c: str) -> bool:
        """Whether `schema` says nothing about values of category `c` beyond admitting them."""
        if schema is True:
            return True
        if not isinstance(schema, dict) or c not in self.shapes.admits(schema):
            return False
        own = OBJECT_KEYWORDS if c == OBJECT else ARRAY_KEYWORDS
        keywords = (*own, *_COMPLEMENTS[c], *DYNAMIC, "$ref", "allOf", "anyOf", "oneOf", "enum", "const")
        return not any(k in schema for k in keywords)

    def string_keys(self) -> Dfa:
        return string_dfa()
