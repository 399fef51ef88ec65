"""JSON Schema (draft 2020-12) to a character-level FSM accepting exactly the compact JSON
serialisations of valid instances, or a ConstraintError naming what cannot be compiled.

Serialisation accepted: no whitespace (unless `whitespace` allows a bounded amount), strings
in canonical `json.dumps(ensure_ascii=False)` escaping, numbers in plain decimal notation (no
exponent), object keys declared in `properties` first in the schema's order, other keys after
them in any order. Within that language the FSM is exact: every accepted string is valid, and
valid instances are rejected only where documented (free-form values nested deeper than
`max_nesting_depth`, `$ref` recursion deeper than `max_recursion_depth`, format subsets).

Objects with duplicate keys have no JSON Schema meaning and are outside these semantics: the
FSM never repeats a key the schema names, but free-form parts (extra keys of an object that
allows them) may repeat a key, and a complement (`not`, `oneOf`, `if`, dependentSchemas)
does not see through such repetitions.

allOf, oneOf, not and if/then/else use DFA intersection, difference and complement. A schema
under `not` (or a `oneOf` branch, or an `if`) is compiled in *exact* mode, where every named
key may appear in any order and formats are annotations, so that its complement is exact.

`$dynamicRef` follows the dynamic scope (the resources entered on the way, outermost first).
`lenient=True` ignores unsupported keywords (uniqueItems, case splits of unevaluated* that are
too large, $recursiveRef) instead of raising; the FSM may then accept what they reject.
"""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any, Callable, Optional

from interegular.fsm import FSM

from sgl_runtime.constrained.automata import (
    BUDGET_EXCEEDED,
    EMPTY,
    Dfa,
    literal,
    to_interegular,
    work_budget,
    work_left,
)
from sgl_runtime.constrained.automata_ops import intersect, union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema import numbers
from sgl_runtime.constrained.json_schema.applicators import applicator_parts, dependent_schemas
from sgl_runtime.constrained.json_schema.arrays import array_dfa
from sgl_runtime.constrained.json_schema.drafts import check_options, to_latest
from sgl_runtime.constrained.json_schema.formats import format_content
from sgl_runtime.constrained.json_schema.numbers import number_dfa
from sgl_runtime.constrained.json_schema.objects import object_dfa
from sgl_runtime.constrained.json_schema.refs import RefResolver
from sgl_runtime.constrained.json_schema.shapes import (
    ALL_TYPES,
    ARRAY_KEYWORDS,
    NUMBER_KEYWORDS,
    OBJECT_KEYWORDS,
    STRING_KEYWORDS,
    types_of,
)
from sgl_runtime.constrained.json_schema.strings import string_dfa
from sgl_runtime.constrained.json_schema.unevaluated import needs_case_split, unevaluated_constraint
from sgl_runtime.constrained.json_schema.values import (
    EXACT,
    FREE_ORDER,
    NORMAL,
    Tokens,
    count_keyword,
    json_type_of,
)

__all__ = ["schema_to_fsm", "schema_to_dfa", "ConstraintError"]

TYPE_KEYWORDS = {
    "number": NUMBER_KEYWORDS,
    "string": STRING_KEYWORDS,
    "array": ARRAY_KEYWORDS,
    "object": OBJECT_KEYWORDS,
}
UNSUPPORTED = ("$recursiveRef",)


def schema_to_fsm(
    schema,
    *,
    whitespace=None,
    lenient: bool = False,
    max_recursion_depth: int = 3,
    max_nesting_depth: int = 3,
    max_work_states: int = 150_000,
    integral_floats: bool = False,
    indent: int | None = None,
    key_order: str = "properties",
) -> FSM:
    """A character-level interegular FSM accepting the compact JSON serialisations of valid instances.

    whitespace: None (compact), an int n (up to n blanks around punctuation) or a finite regex.
    lenient: ignore unsupported keywords instead of raising ConstraintError.
    max_recursion_depth: how many times a recursive $ref is unrolled along one path.
    max_nesting_depth: free-form values (no structural constraints) nest containers this deep.
    max_work_states: bound on all automaton states built while compiling (bounds compile time).
    integral_floats: also accept integral values spelled "81.0" (default: plain digits "81" only).
    indent: N gives the json.dumps(indent=N) shape (newlines, multiples of N spaces, ": ").
    key_order: "properties" (declared keys in the schema's order) or "any".
    """
    return to_interegular(
        schema_to_dfa(
            schema,
            whitespace=whitespace,
            lenient=lenient,
            max_recursion_depth=max_recursion_depth,
            max_nesting_depth=max_nesting_depth,
            max_work_states=max_work_states,
            integral_floats=integral_floats,
            indent=indent,
            key_order=key_order,
        )
    )


def schema_to_dfa(
    schema,
    *,
    whitespace=None,
    lenient: bool = False,
    max_recursion_depth: int = 3,
    max_nesting_depth: int = 3,
    max_work_states: int = 150_000,
    integral_floats: bool = False,
    indent: int | None = None,
    key_order: str = "properties",
    repeated_keys: bool = False,
) -> Dfa:
    """Like schema_to_fsm, returning this package's minimal `Dfa` (with `.accepts(text)`); with
    `repeated_keys`, minProperties counts an undeclared key written twice twice (language.py)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise ConstraintError(f"json_schema: not valid JSON: {exc}") from None
    check_options(schema, integral_floats, key_order)
    schema = to_latest(schema)
    with work_budget(max_work_states), numbers.integral_floats(integral_floats):
        tokens = _tokens(whitespace, indent, integral_floats)
        try:
            compiler = _Compiler(schema, tokens, lenient, max_recursion_depth, max_nesting_depth)
            compiler.repeated_keys = repeated_keys
            return compiler.compile(schema, 0, NORMAL if key_order == "properties" else FREE_ORDER)
        except RecursionError:
            raise ConstraintError("json_schema: schema nested too deeply to compile") from None


@functools.lru_cache(maxsize=16)
def _tokens(whitespace, indent, integral_floats: bool) -> Tokens:
    """Shared per (whitespace, indent, number spelling): Tokens caches the free-form value automata."""
    return Tokens(whitespace, indent)


class _Compiler:
    def __init__(self, root, tokens: Tokens, lenient: bool, max_recursion_depth: int, max_nesting_depth: int):
        self.tokens = tokens
        self.lenient = lenient
        self.max_recursion = max_recursion_depth
        self.max_depth = max_nesting_depth
        self.refs = RefResolver(root)
        self.ref_counts: dict[int, int] = {}
        self.cache: dict = {}
        self.scope: list[str] = []  # dynamic scope: base URIs of the resources entered, outermost first
        self.dynamic = self.refs.dynamic  # dynamic scope matters (also when a metaschema brings $dynamicRef)
        self.synthesized: list = []
        self.in_branch = 0  # > 0 while compiling subschemas of allOf/anyOf/oneOf/not/if/dependentSchemas
        # unevaluated* case splits multiply with wider wildcards past the work budget: those schemas keep
        # the root-counted depth everywhere
        self.widen_wildcards = '"unevaluated' not in json.dumps(root)
        # schemas whose language holds at any level (the grammar form's closed ones): compiled once
        self.level_free: Optional[Callable[[Any], bool]] = None
        self.too_large: dict = {}  # level-free keys whose compile alone ran out of work budget: their error
        # grammar-form leaves: see objects.py's KEYS_NOT_REGULAR and arrays.py's COUNTED_BY_GRAMMAR refusals
        self.keys_tracked = self.repeated_keys = self.counts_items = False

    def unsupported(self, keyword: str, why: str) -> None:
        if not self.lenient:
            raise ConstraintError(f"{keyword}: unsupported ({why})")

    def any(self, level: int) -> Dfa:
        return self.tokens.any_value(self.free_budget(level))

    def free_budget(self, level: int) -> int:
        """How deep a free-form value at `level` may nest. Within an applicator's subschema a
        free-form value is a wildcard that the sibling schemas intersect (anyOf: [{required: [b]}]
        says nothing of b's value): it nests max_depth deep from where it starts, so a deeply
        structured sibling value is not cut to what is left of the depth at `level`. Elsewhere the
        depth counts from the root, but a free-form value always keeps one level of its own (a flat
        object or array, `{}` included) however deep it sits."""
        if self.in_branch and self.widen_wildcards:
            return self.max_depth
        return max(self.max_depth - level, min(self.max_depth, 1))

    @contextlib.contextmanager
    def branch(self):
        self.in_branch += 1
        try:
            yield
        finally:
            self.in_branch -= 1

    def compile(self, schema, level: int, mode: int) -> Dfa:
        """The language of `schema` for a value at nesting `level` (mode: NORMAL, FREE_ORDER or EXACT)."""
        if schema is True:
            return self.any(level)
        if schema is False:
            return EMPTY
        if not isinstance(schema, dict):
            raise ConstraintError(f"schema must be an object or a boolean, got {schema!r}")
        base = self.refs.base(schema)
        entered = not self.scope or self.scope[-1] != base
        if entered:
            self.scope.append(base)
        try:
            scope = tuple(self.scope) if self.dynamic else None
            level_free = self.level_free is not None and self.level_free(schema)
            if level_free:
                key: tuple = (id(schema), mode, scope)
            else:
                key = (
                    id(schema),
                    max(self.free_budget(level), 0),  # what `level` changes: the free-form depth left
                    mode,
                    tuple(sorted(self.ref_counts.items())),
                    scope,
                )
            if key not in self.cache:
                self.cache[key] = (schema, self._compile_once(schema, level, mode, key, level_free))
            return self.cache[key][1]
        finally:
            if entered:
                self.scope.pop()

    def _compile_once(self, schema: dict, level: int, mode: int, key: tuple, level_free: bool) -> Dfa:
        """`_compile`, remembering a level-free schema that exhausts the work budget on its own (it
        had nearly all of the budget when it started): later attempts to build it flat fail at once."""
        if key in self.too_large:
            raise ConstraintError(self.too_large[key])
        left = work_left()
        try:
            return self._compile(schema, level, mode)
        except ConstraintError as exc:
            alone = left is not None and left[0] * 10 >= left[1] * 9
            if alone and level_free and str(exc).startswith(BUDGET_EXCEEDED):
                self.too_large[key] = str(exc)
            raise

    def _compile(self, schema: dict, level: int, mode: int) -> Dfa:
        self._check_unsupported(schema)
        if _contributors(schema) >= 2:
            mode = max(mode, FREE_ORDER)  # several schemas constrain the same object's keys
        parts = [self._unevaluated(schema, level, mode)] if needs_case_split(schema) else []  # fails fast
        parts.append(self._values(schema, level, mode))
        universe = self.any(level)
        with self.branch():
            parts += applicator_parts(self, schema, level, mode, universe)
        if "$ref" in schema:
            parts.append(self._ref(schema, level, mode))
        if "$dynamicRef" in schema:
            parts.append(self._ref(schema, level, mode, keyword="$dynamicRef"))
        if "dependentSchemas" in schema:
            with self.branch():
                parts.append(dependent_schemas(self, schema["dependentSchemas"], level, mode, universe))
        free = self.any(level)  # depth-bounded: only for values nothing else constrains
        parts = [p for p in parts if p is not free] or [free]
        parts.sort(key=lambda d: d.num_states)
        result = parts[0]
        for part in parts[1:]:
            result = intersect(result, part)
        return result

    def _check_unsupported(self, schema: dict) -> None:
        for kw in UNSUPPORTED:
            if kw in schema:
                self.unsupported(kw, "not a regular constraint")

    # ----------------------------------------------------------------- types and values
    def _values(self, schema: dict, level: int, mode: int) -> Dfa:
        types = types_of(schema, integer_in_number=False)
        has_type_keywords = any(k in schema for kws in TYPE_KEYWORDS.values() for k in kws) or any(
            k in schema for k in ("unevaluatedProperties", "unevaluatedItems")
        )
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            if not isinstance(values, list):
                raise ConstraintError("enum: expected a list")
            values = [v for v in values if _type_allowed(json_type_of(v), types)]
            lit = union(*(self.tokens.literal_value(v, exact=mode == EXACT) for v in values))
            if not has_type_keywords:
                return lit
            return intersect(lit, self._typed(schema, types, level, mode))
        if types == ALL_TYPES and not has_type_keywords:
            return self.any(level)
        return self._typed(schema, types, level, mode)

    def _typed(self, schema: dict, types: tuple, level: int, mode: int) -> Dfa:
        parts = []
        if "null" in types:
            parts.append(literal("null"))
        if "boolean" in types:
            parts.append(union(literal("true"), literal("false")))
        if "number" in types or "integer" in types:
            parts.append(number_dfa("number" not in types, schema))
        if "string" in types:
            parts.append(self._string(schema, mode))
        budget = self.free_budget(level)
        if "array" in types:
            arr = _with_unevaluated(schema, "unevaluatedItems", "items")
            free = not any(k in arr for k in TYPE_KEYWORDS["array"])
            parts.append(self.tokens.any_array(budget) if free else array_dfa(self, arr, level, mode))
        if "object" in types:
            obj = _with_unevaluated(schema, "unevaluatedProperties", "additionalProperties")
            free = not any(k in obj for k in TYPE_KEYWORDS["object"])
            parts.append(self.tokens.any_object(budget) if free else object_dfa(self, obj, level, mode))
        return union(*parts)

    def _string(self, schema: dict, mode: int) -> Dfa:
        patterns = schema.get("pattern")
        if patterns is not None and not isinstance(patterns, str):
            raise ConstraintError("pattern: expected a string")
        extra = ()
        fmt = schema.get("format")
        if fmt is not None and mode != EXACT:
            content = format_content(fmt) if isinstance(fmt, str) else None
            extra = (content,) if content is not None else ()
        return string_dfa(
            count_keyword(schema, "minLength", 0),
            count_keyword(schema, "maxLength", None),
            (patterns,) if patterns is not None else (),
            extra,
            mode == EXACT,
        )

    def _unevaluated(self, schema: dict, level: int, mode: int) -> Dfa:
        try:
            return unevaluated_constraint(self, schema, level, mode)
        except ConstraintError as exc:
            self.unsupported("unevaluatedProperties/unevaluatedItems", str(exc))
            return self.any(level)

    def keep(self, schema: dict) -> dict:
        """Keeps a synthesized schema alive for the compile cache (keyed by id)."""
        self.synthesized.append(schema)
        return schema

    def _ref(self, schema: dict, level: int, mode: int, keyword: str = "$ref") -> Dfa:
        ref = schema[keyword]
        if not isinstance(ref, str):
            raise ConstraintError(f"{keyword}: expected a string")
        if keyword == "$dynamicRef":
            target = self.refs.resolve_dynamic(ref, schema, self.scope)
        else:
            target = self.refs.resolve(ref, schema)
        key = id(target)
        depth = self.ref_counts.get(key, 0)
        if depth >= self.max_recursion:
            if mode == EXACT:
                raise ConstraintError(
                    f"$ref: recursion through {ref!r} deeper than max_recursion_depth cannot be negated exactly"
                )
            return EMPTY
        self.ref_counts[key] = depth + 1
        try:
            return self.compile(target, level, mode)
        finally:
            if depth:
                self.ref_counts[key] = depth
            else:
                del self.ref_counts[key]


def _contributors(schema: dict) -> int:
    """How many subschemas (own keywords included) may constrain the same object's key order."""
    own = any(k in schema for k in TYPE_KEYWORDS["object"])
    applicators = sum(k in schema for k in ("anyOf", "oneOf", "if", "$ref", "$dynamicRef", "dependentSchemas"))
    applicators += "if" in schema and ("then" in schema or "else" in schema)  # `if` and its branch
    all_of = schema.get("allOf")
    return own + applicators + (len(all_of) if isinstance(all_of, list) else 0) + needs_case_split(schema)


def _type_allowed(value_type: str, types: tuple) -> bool:
    return value_type in types or (value_type == "integer" and "number" in types)


def _with_unevaluated(schema: dict, keyword: str, local: str) -> dict:
    """unevaluated* without in-place applicators acts like its local counterpart."""
    if needs_case_split(schema):
        return schema
    if keyword in schema and schema[keyword] is not True and local not in schema:
        return {**schema, local: schema[keyword]}
    return schema
