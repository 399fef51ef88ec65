"""JSON value automata shared by the schema compiler: punctuation with bounded whitespace,
free-form values nested to a bounded depth, and the spellings of literal values (const/enum)."""

from __future__ import annotations

from sgl_runtime.constrained.automata import EMPTY, Dfa, literal
from sgl_runtime.constrained.automata_ops import Nfa, concat, repeat, union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.numbers import number_literal_dfa, number_universe, rx
from sgl_runtime.constrained.json_schema.strings import string_dfa, string_literal

JSON_WHITESPACE = frozenset(" \t\n\r")

# Compile modes. NORMAL may under-approximate (fixed key order, formats enforced); FREE_ORDER also
# accepts named keys in any order (used where several schemas constrain one object, e.g. allOf);
# EXACT accepts exactly the valid instances (needed for complements: not, oneOf, if, contains).
NORMAL, FREE_ORDER, EXACT = 0, 1, 2
MAX_FREE_ORDER_KEYS = 6  # object literals with more keys are accepted in their written order only


def whitespace_dfa(whitespace) -> Dfa | None:
    """None/0 = compact; an int n = up to n whitespace characters; a regex = that (finite) language."""
    if whitespace is None or whitespace == 0 or whitespace == "":
        return None
    if isinstance(whitespace, bool) or not isinstance(whitespace, (int, str)):
        raise ConstraintError(f"whitespace: expected None, an int or a regex, got {whitespace!r}")
    if isinstance(whitespace, int):
        if whitespace < 0:
            raise ConstraintError("whitespace: count must be >= 0")
        return rx("[ \\t\\n\\r]{0,%d}" % whitespace)
    try:
        dfa = rx(whitespace)
    except Exception as exc:  # interegular raises several types for bad regexes
        raise ConstraintError(f"whitespace: invalid regex {whitespace!r}: {exc}") from None
    for edges in dfa.edges:
        for cs, _ in edges:
            if cs.negated or not cs.chars <= JSON_WHITESPACE:
                raise ConstraintError("whitespace: the regex may only match JSON whitespace (space, \\t, \\n, \\r)")
    if _has_cycle(dfa):
        raise ConstraintError("whitespace: the regex must be bounded (no * or +), so a model cannot loop on blanks")
    return dfa


def _has_cycle(dfa: Dfa) -> bool:
    color = [0] * dfa.num_states

    def visit(s: int) -> bool:
        color[s] = 1
        for _, t in dfa.edges[s]:
            if color[t] == 1 or (color[t] == 0 and visit(t)):
                return True
        color[s] = 2
        return False

    return visit(0)


MAX_INDENT_LEVELS = 8


class Tokens:
    """Punctuation DFAs (`{`, `}`, `[`, `]`, `,`, `:`) with the configured whitespace around them."""

    def __init__(self, whitespace=None, indent: int | None = None):
        """indent=N: a newline and up to MAX_INDENT_LEVELS multiples of N spaces after `{ [ ,`
        and before `} ]`, and ": " after keys (the json.dumps(indent=N) shape, depth not enforced)."""
        if indent is not None and whitespace is not None:
            raise ConstraintError("give either whitespace or indent, not both")
        if indent is not None and (isinstance(indent, bool) or not isinstance(indent, int) or indent < 0):
            raise ConstraintError(f"indent: expected an integer >= 0, got {indent!r}")
        self.ws = (
            whitespace_dfa(whitespace) if indent is None else rx("(\n( {%d}){0,%d})?" % (indent, MAX_INDENT_LEVELS))
        )
        self._any: dict[int, Dfa] = {}
        ws = [self.ws] if self.ws is not None else []
        self.lbrace = concat(literal("{"), *ws)
        self.rbrace = concat(*ws, literal("}"))
        self.lbracket = concat(literal("["), *ws)
        self.rbracket = concat(*ws, literal("]"))
        self.comma = concat(*ws, literal(","), *ws) if indent is None else concat(literal(","), *ws)
        self.colon = concat(*ws, literal(":"), *ws) if indent is None else literal(": ")

    def array(self, elements: Dfa, lo: int = 0, hi: int | None = None) -> Dfa:
        body = repeat(elements, lo, hi, sep=self.comma)
        return concat(self.lbracket, body, self.rbracket)

    def pair(self, key: Dfa, value: Dfa) -> Dfa:
        return concat(key, self.colon, value)

    def any_value(self, budget: int) -> Dfa:
        """Any JSON value whose containers nest at most `budget` deep."""
        return self._cached(("value", max(budget, 0)), self._build_any)

    def any_array(self, budget: int) -> Dfa:
        """Any array (elements nesting at most `budget` - 1 deep); empty language when budget <= 0."""
        return self._cached(("array", max(budget, 0)), lambda b: self.array(self.any_value(b - 1)) if b else EMPTY)

    def any_object(self, budget: int) -> Dfa:
        return self._cached(("object", max(budget, 0)), self._build_object)

    def _cached(self, key, build) -> Dfa:
        if key not in self._any:
            self._any[key] = build(key[1])
        return self._any[key]

    def _build_object(self, budget: int) -> Dfa:
        if budget <= 0:
            return EMPTY
        pairs = repeat(self.pair(string_dfa(), self.any_value(budget - 1)), 0, None, sep=self.comma)
        return concat(self.lbrace, pairs, self.rbrace)

    def _build_any(self, budget: int) -> Dfa:
        scalars = union(literal("null"), literal("true"), literal("false"), number_universe(), string_dfa())
        return union(scalars, self.any_array(budget), self.any_object(budget))

    def literal_value(self, value, *, exact: bool) -> Dfa:
        """Every accepted spelling of the JSON value `value` (numbers by value, objects in any key order)."""
        if value is None:
            return literal("null")
        if value is True:
            return literal("true")
        if value is False:
            return literal("false")
        if isinstance(value, (int, float)):
            return number_literal_dfa(value)
        if isinstance(value, str):
            return literal(string_literal(value))
        if isinstance(value, list):
            if not value:
                return concat(self.lbracket, self.rbracket)
            items = [self.literal_value(v, exact=exact) for v in value]
            parts = [self.lbracket, items[0]]
            for item in items[1:]:
                parts += [self.comma, item]
            return concat(*parts, self.rbracket)
        if isinstance(value, dict):
            return self._literal_object(value, exact)
        raise ConstraintError(f"const/enum: {value!r} is not a JSON value")

    def _literal_object(self, value: dict, exact: bool) -> Dfa:
        if not value:
            return concat(self.lbrace, self.rbrace)
        pairs = [self.pair(literal(string_literal(k)), self.literal_value(v, exact=exact)) for k, v in value.items()]
        if len(pairs) > MAX_FREE_ORDER_KEYS:
            if exact:
                raise ConstraintError(f"const/enum: object with {len(pairs)} keys is too large to negate exactly")
            orders = [range(len(pairs))]
        else:
            orders = None
        return concat(self.lbrace, self._pairs_any_order(pairs, orders), self.rbrace)

    def _pairs_any_order(self, pairs: list[Dfa], orders) -> Dfa:
        """All pairs, each exactly once, comma-separated, in any order (or the given orders)."""
        if orders is not None:
            seq = [pairs[0]]
            for p in pairs[1:]:
                seq += [self.comma, p]
            return concat(*seq)
        nfa = Nfa()
        full = (1 << len(pairs)) - 1
        states = {0: nfa.add_state()}
        for mask in range(full + 1):
            if mask not in states:
                continue
            for i, p in enumerate(pairs):
                if mask & (1 << i):
                    continue
                nxt = mask | (1 << i)
                if nxt not in states:
                    states[nxt] = nfa.add_state()
                item = p if mask == 0 else concat(self.comma, p)
                s, fs = nfa.embed(item)
                nfa.add_eps(states[mask], s)
                for f in fs:
                    nfa.add_eps(f, states[nxt])
        nfa.finals.add(states[full])
        return nfa.determinize(states[0])


def json_type_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise ConstraintError(f"const/enum: {value!r} is not a JSON value")


def count_keyword(schema: dict, key: str, default: int | None) -> int | None:
    """A non-negative integer keyword (minItems, maxProperties, ...); integral floats allowed."""
    value = schema.get(key, default)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConstraintError(f"{key}: expected a non-negative integer, got {value!r}")
    return value
