"""unevaluatedProperties in the grammar form (object_merge.static_unevaluated): where the keys it
applies to do not depend on which branches an object satisfies, it is one more conjunct of the
object rule; exact against jsonschema on every object of up to three keys, or refused. The shapes
are those of real schemas (Meltano's plugins, the OpenAPI 3.1 document and Reference objects,
Compose's services)."""

from __future__ import annotations

import itertools

import pytest
from schema_verdicts import disagreements, small_objects

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.language import schema_to_grammar

FREE = {}  # a free-form value keeps the object out of one automaton
SCHEMAS = {
    # two $ref targets' keys are evaluated, nothing else is allowed
    "all_of_refs": {
        "$defs": {
            "a": {"type": "object", "properties": {"a": {"type": "string"}, "v": FREE}},
            "b": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
        },
        "allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}],
        "unevaluatedProperties": False,
    },
    # conditions over present keys evaluate no key; a $ref's patternProperties do
    "presence_conditions_and_patterns": {
        "$defs": {"ext": {"patternProperties": {"^x-": FREE}}},
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": FREE, "c": {"type": "integer"}},
        "anyOf": [{"required": ["a"]}, {"required": ["c"]}],
        "$ref": "#/$defs/ext",
        "unevaluatedProperties": {"type": "array"},
    },
    # an if over a present key chooses between objects that have their own unevaluatedProperties
    "cases_with_their_own": {
        "$defs": {
            "ref": {
                "type": "object",
                "properties": {"$ref": {"type": "string"}, "v": FREE},
                "unevaluatedProperties": False,
            },
            "item": {
                "type": "object",
                "properties": {"a": {"type": "string"}, "v": FREE},
                "additionalProperties": False,
            },
        },
        "type": "array",
        "items": {
            "type": "object",
            "if": {"required": ["$ref"]},
            "then": {"$ref": "#/$defs/ref"},
            "else": {"$ref": "#/$defs/item"},
        },
    },
}
VALUES = ["s", 1, [1], {"k": [{}]}]
KEYS = ["a", "b", "c", "v", "x-1", "$ref"]


def _objects():
    return small_objects(KEYS, VALUES, [VALUES[:3], VALUES[1:]])


def _orders(instance):
    """`instance` with its (outer) object's keys in every order: the grammar takes one order, which
    compact_json does not know where if/then/else cases choose it."""
    inner = instance[0] if isinstance(instance, list) else instance
    for keys in itertools.permutations(inner):
        ordered = {k: inner[k] for k in keys}
        yield [ordered] if isinstance(instance, list) else ordered


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_static_unevaluated_properties_are_exact(name):
    """A valid object is accepted in some key order, an invalid one in none."""
    schema = SCHEMAS[name]
    instances = [[o] for o in _objects()] if schema.get("type") == "array" else _objects()
    wrong, valid = disagreements(schema, instances, _orders)
    assert wrong == [], wrong[:5]
    assert 5 < valid < len(instances)


def test_keys_evaluated_by_one_branch_only_are_refused():
    """Which keys an `if`'s `then` evaluates depends on the object: not a conjunct, refused."""
    schema = {
        "type": "object",
        "properties": {"in": {"enum": ["q", "h"]}, "v": FREE},
        "if": {"properties": {"in": {"const": "q"}}, "required": ["in"]},
        "then": {"properties": {"empty": {"type": "boolean"}}},
        "unevaluatedProperties": False,
    }
    with pytest.raises(ConstraintError, match="unevaluatedProperties"):
        schema_to_grammar(schema)
