"""Which form a JSON Schema compiles to: the flat automaton (compiler.py) or the grammar form
(grammar_form.py), both with `.accepts(text)`.

- a schema whose flat automaton is exact (`shapes.closed`: no free-form value, no recursive
  `$ref`) compiles flat, unless that exceeds its work budget: then the grammar form;
- any other schema compiles to the grammar form, exact at any depth; where the grammar form
  refuses a keyword (e.g. `oneOf` over object alternatives it cannot tell apart, not a size limit), the
  flat automaton with its documented bounds (`max_nesting_depth`, `max_recursion_depth`) is used
  if it compiles;
- `uniqueItems` that the automaton cannot enforce (items of an infinite domain) takes the grammar
  form, which enforces it on items spelled one way only (`unique_grammar.py`);
- a closed schema with a string of a length bound over FLAT_LENGTHS_UP_TO (256) characters
  takes the grammar form, where that string is one counted terminal (long_strings.py), unless
  the grammar form refuses it (a shorter one keeps the automaton and its device-side masks);
- an explicit `max_nesting_depth` or `max_recursion_depth` asks for the bounded flat automaton;
- an object whose undeclared keys count towards `minProperties` takes the grammar form, whose
  objects reject a key written twice (`{"a":1,"a":2}` is one property); only where the grammar form
  refuses the schema does the flat automaton count such a key as written.
"""

from __future__ import annotations

import contextlib
import json

from sgl_runtime.constrained.automata import work_budget
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema import numbers
from sgl_runtime.constrained.json_schema.compiler import _Compiler, _tokens, schema_to_dfa
from sgl_runtime.constrained.json_schema.drafts import check_options, to_latest
from sgl_runtime.constrained.json_schema.dynamic_refs import static_dynamic_refs
from sgl_runtime.constrained.json_schema.grammar_form import (
    LEAF_FIRST_STATES,
    LEAF_WORK_STATES,
    GrammarBuilder,
    SchemaGrammar,
    is_budget_error,
    is_unique_refusal,
)
from sgl_runtime.constrained.json_schema.long_strings import has_long_strings
from sgl_runtime.constrained.json_schema.objects import is_keys_refusal
from sgl_runtime.constrained.json_schema.refs import RefResolver
from sgl_runtime.constrained.json_schema.schema_grammar import is_ambiguity_refusal
from sgl_runtime.constrained.json_schema.shapes import Shapes
from sgl_runtime.constrained.json_schema.values import FREE_ORDER, NORMAL

_BOUNDS = ("max_nesting_depth", "max_recursion_depth")
FLAT_LENGTHS_UP_TO = 256  # a closed schema with a longer string takes the grammar form (counted strings)


def compile_schema(schema, **options):
    """The flat `Dfa` or the `SchemaGrammar` of `schema` (see the module docstring)."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise ConstraintError(f"json_schema: not valid JSON: {exc}") from None
    if any(k in options for k in _BOUNDS):
        return _flat(schema, options)
    check_options(schema, options.get("integral_floats", False), options.get("key_order", "properties"))
    latest = to_latest(schema)
    try:
        closed = Shapes(RefResolver(latest)).closed(latest)
    except RecursionError:
        raise ConstraintError("json_schema: schema nested too deeply to compile") from None
    if closed and has_long_strings(latest, above=FLAT_LENGTHS_UP_TO):
        try:
            return schema_to_grammar(schema, **options)  # long strings stay counted, not one state each
        except ConstraintError as exc:
            if is_budget_error(exc) or is_unique_refusal(exc):
                raise  # the flat automaton would refuse it too, after building long strings whole
    if closed:
        try:
            return schema_to_dfa(schema, **options)
        except ConstraintError as exc:
            if not (is_budget_error(exc) or is_unique_refusal(exc)):
                raise
            refused = exc
        try:
            return schema_to_grammar(schema, **options)
        except ConstraintError:
            if is_keys_refusal(refused):
                return schema_to_dfa(schema, repeated_keys=True, **options)
            if is_unique_refusal(refused):
                raise refused from None
            raise
    try:
        return schema_to_grammar(schema, **options)
    except ConstraintError as exc:
        if is_budget_error(exc) or (is_unique_refusal(exc) and has_long_strings(latest)):
            raise  # the flat automaton would need more still, or refuse the same after building long strings
        refused = exc
    try:
        return _flat(schema, options)
    except ConstraintError:
        raise refused from None


def _flat(schema, options: dict):
    """The flat automaton; where undeclared keys must not repeat (minProperties) and the grammar
    form cannot take the schema, the one that counts a key written twice twice (documented)."""
    try:
        return schema_to_dfa(schema, **options)
    except ConstraintError as exc:
        if not is_keys_refusal(exc):
            raise
    return schema_to_dfa(schema, repeated_keys=True, **options)


def schema_to_grammar(
    schema,
    *,
    whitespace=None,
    lenient: bool = False,
    max_work_states: int = 150_000,
    integral_floats: bool = False,
    indent: int | None = None,
    key_order: str = "properties",
) -> SchemaGrammar:
    """The grammar form of `schema` (options as for `schema_to_fsm`, without the depth bounds)."""
    check_options(schema, integral_floats, key_order)
    latest = static_dynamic_refs(to_latest(schema))
    with work_budget(max_work_states), numbers.integral_floats(integral_floats):
        tokens = _tokens(whitespace, indent, integral_floats)
        comp = _Compiler(latest, tokens, lenient, 3, 3)
        mode = NORMAL if key_order == "properties" else FREE_ORDER
        leaf_budget = min(LEAF_WORK_STATES, max_work_states)
        try:
            try:
                return _build(comp, mode, leaf_budget, max_work_states, latest)
            except ConstraintError as exc:
                if not (exc.value_tests_used and is_ambiguity_refusal(exc)):
                    raise
                first = exc
            # value tests the grammar could not tell apart: anyOf/oneOf over objects as object rules
            # of their own instead, where object_merge.py can say them so
            try:
                return _build(comp, mode, leaf_budget, max_work_states, latest, distribute_first=True)
            except ConstraintError:
                raise first from None  # the first attempt's refusal names the value tests
        except RecursionError:
            raise ConstraintError("json_schema: schema nested too deeply to compile") from None


def _build(comp, mode: int, leaf_budget: int, max_work_states: int, schema, distribute_first: bool = False):
    """The grammar form, its objects' and arrays' flat leaves first given LEAF_FIRST_STATES (most
    that need more are better as rules, and a doomed attempt at the whole budget costs seconds);
    where one was cut short and the build failed, again with the whole budget (and its own total).
    The ConstraintError raised says `value_tests_used` (the build that raised it used value tests)."""
    for first_budget in (LEAF_FIRST_STATES, None):
        builder = GrammarBuilder(comp, mode, leaf_budget, first_budget)
        builder.distribute_first = distribute_first
        with work_budget(max_work_states) if first_budget is None else contextlib.nullcontext():
            try:
                return builder.build(schema)
            except ConstraintError as exc:
                exc.value_tests_used = builder.value_tests_used
                if first_budget is None or not builder.cut_short:
                    raise
    raise AssertionError("unreachable: the second build returns or raises")
