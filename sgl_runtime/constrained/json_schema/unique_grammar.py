"""uniqueItems in the grammar form: the item terminals of an array whose items must be distinct.

Exact where equal items have equal text, i.e. every item value has one spelling in this
serialisation; the grammar engine then keeps the items of the array being written
(`GrammarEngine`, `unique_terminals`) and rejects a repeat.
"""

from __future__ import annotations

from sgl_runtime.constrained.automata import work_budget
from sgl_runtime.constrained.automata_ops import concat
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.long_strings import NOT_COUNTED, counted_items, holds_long_string
from sgl_runtime.constrained.json_schema.shapes import ARRAY_KEYWORDS, DYNAMIC, OBJECT_KEYWORDS, SCALAR_KEYWORDS
from sgl_runtime.constrained.json_schema.values import NORMAL

# keywords that may shape a value, and those of them an item of a unique array may use (canonical)
_SHAPING = (
    *SCALAR_KEYWORDS,
    *OBJECT_KEYWORDS,
    *ARRAY_KEYWORDS,
    *DYNAMIC,
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "enum",
    "const",
    "type",
)
_CANONICAL_KEYWORDS = {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "pattern",
    "minLength",
    "maxLength",
    "format",
    "minProperties",
    "maxProperties",
}


def unique_items(b, items, is_budget_error, leaf_max_states: int):
    """Terminals (first item, `,item`) for the items of an array whose items must be unique, or
    None when no item is valid. Exact where equal items have equal text: item values spelled
    one way only (strings, true/false/null, objects without undeclared keys whose keys come in
    `properties` order, of such values; compact JSON), each item ONE automaton."""
    if b.tokens.ws is not None or not canonical(b, items):
        b.comp.unsupported(
            "uniqueItems",
            "exact in the grammar form for items spelled one way only: strings, booleans, null, and objects "
            "of those with additionalProperties false, in compact JSON with key_order 'properties'",
        )
        return b.node(items)
    counted = counted_items(b, items)
    if counted is not NOT_COUNTED:
        return counted
    dfa = None
    try:
        if not holds_long_string(b, items, patterned=True):  # long patterned strings: too large an item automaton
            with work_budget(b.leaf_budget):
                dfa = b.comp.compile(items, 0, b.mode)
    except ConstraintError as exc:
        if not is_budget_error(exc):
            raise
    if dfa is not None and dfa.num_states <= leaf_max_states:
        if dfa.is_empty():
            return None
        try:
            return b.terminal(dfa, unique=1), b.terminal(concat(b.tokens.comma, dfa), unique=2)
        except ConstraintError as exc:
            if not is_budget_error(exc):
                raise
    b.comp.unsupported("uniqueItems", "the items of a unique array must fit one automaton (grammar form)")
    return b.node(items)


def canonical(b, schema, depth: int = 0) -> bool:
    """Whether every value `schema` admits has one spelling here (see unique_items)."""
    if depth > 32 or not isinstance(schema, dict):
        return False
    if "$ref" in schema:
        return not any(k in schema for k in _SHAPING if k != "$ref") and canonical(
            b, b.shapes.target(schema), depth + 1
        )
    if any(k in schema for k in _SHAPING if k not in _CANONICAL_KEYWORDS):
        return False
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list):
        return all(v is None or isinstance(v, (str, bool)) for v in values)
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types
    if not isinstance(types, list) or not types or not set(types) <= {"string", "boolean", "null", "object"}:
        return False
    if "object" not in types:
        return True
    props = schema.get("properties", {})
    return (
        b.mode == NORMAL
        and schema.get("additionalProperties") is False
        and isinstance(props, dict)
        and all(canonical(b, p, depth + 1) for p in props.values())
    )
