"""oneOf over object alternatives that do not exclude each other by their keys alone, in the
grammar form (json_schema/one_of.py, object_union.py): exact against jsonschema on every object
of up to three keys, or refused. The shapes are those of real schemas (CloudFormation's
one-optional-key objects, Buildkite's notifications sharing an `if` key, Bitbucket's two
`import` formats)."""

from __future__ import annotations

import jsonschema
import pytest
from schema_verdicts import disagreements, small_objects

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.language import schema_to_grammar


def _closed(**props):
    return {"type": "object", "properties": props, "additionalProperties": False}


STRING = {"type": "string"}
SCHEMAS = {
    # each alternative allows one key, none requires it: {} satisfies all three
    "one_optional_key_each": {
        "type": "array",
        "items": {"oneOf": [_closed(a=STRING), _closed(b=STRING), _closed(c={})]},
    },
    # a shared optional key with one schema: objects of that key alone satisfy every alternative
    "shared_optional_key": {
        "$defs": {"if": STRING},
        "type": "array",
        "items": {
            "oneOf": [
                {"enum": ["a", "b"]},
                _closed(a=STRING, k={"$ref": "#/$defs/if"}),
                _closed(b={"type": "integer"}, k={"$ref": "#/$defs/if"}),
                {**_closed(c={"type": "array"}, k={"$ref": "#/$defs/if"}), "required": ["c"]},
            ]
        },
    },
    # alike but for the value of the key both require: the values that exactly one allows
    "one_key_apart": {
        "type": "array",
        "items": {
            "oneOf": [
                {**_closed(a={"type": "string", "pattern": "^[^:]+:[^:]+$"}, k={"type": "array"}), "required": ["a"]},
                {**_closed(a={"type": "string", "pattern": "^[^@]+@[^@]+$"}, k={"type": "array"}), "required": ["a"]},
            ]
        },
    },
    # every object satisfies both: no object is valid (strings are, by the first)
    "both_hold_everywhere": {
        "type": "object",
        "properties": {"a": {"oneOf": [{"additionalProperties": True}, {"type": "object", "properties": {"b": {}}}]}},
    },
    # a required key whose value the other alternative gives another kind
    "required_key_of_another_kind": {
        "type": "array",
        "items": {
            "oneOf": [
                {"type": "object", "properties": {"a": STRING}, "required": ["a"]},
                _closed(a={"type": "integer"}, b={}),
            ]
        },
    },
    # a listed value against a `not` that lists it (Travis CI's providers, the last one "any other")
    "listed_against_negated": {
        "type": "array",
        "items": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"a": {"const": "x:y"}},
                    "additionalProperties": {"type": "array"},
                    "required": ["a"],
                },
                {
                    "type": "object",
                    "properties": {"a": {"type": "string", "not": {"enum": ["x:y"]}}},
                    "required": ["a"],
                },
            ]
        },
    },
    # if/then/else on one key's value whose `if` carries annotations (CircleCI's job types)
    "annotated_value_cases": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"a": {"enum": ["x:y", "x@y", 1]}, "k": {}},
            "if": {"description": "a release", "required": ["a"], "properties": {"a": {"const": "x:y"}}},
            "then": {
                "required": ["b"],
                "properties": {"b": {"type": "object", "properties": {"k": {"type": "array"}}}},
            },
            "else": {
                "if": {
                    "markdownDescription": "a build",
                    "anyOf": [{"not": {"required": ["a"]}}, {"properties": {"a": {"const": "x@y"}}, "required": ["a"]}],
                },
                "then": {"properties": {"c": {"type": "object", "properties": {"k": {"type": "integer"}}}}},
                "else": {"required": ["k"], "properties": {"b": False}},
            },
        },
    },
    # a oneOf over required keys whose value tests are the keys' own schemas (Dependabot's
    # directories or directory): only which keys are present decides
    "value_tests_implied_by_properties": {
        "$defs": {"dirs": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/dirs"}, "b": {"type": "object"}, "k": {}},
            "oneOf": [
                {"properties": {"a": {"$ref": "#/$defs/dirs"}}, "required": ["a"]},
                {"properties": {"b": {"type": "object"}}, "required": ["b"]},
            ],
        },
    },
    # cases by one key's value beside an if over present keys (GitLab CI's inputs)
    "value_cases_beside_a_presence_condition": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "c": {}},
            "allOf": [
                {"if": {"required": ["c"]}, "then": {"not": {"anyOf": [{"required": ["b"]}, {"required": ["k"]}]}}},
                {
                    "if": {"properties": {"a": {"enum": ["x:y"]}}, "required": ["a"]},
                    "then": {"properties": {"b": {"type": "object", "properties": {"k": {"type": "array"}}}}},
                },
                {
                    "if": {"properties": {"a": {"enum": ["x@y"]}}, "required": ["a"]},
                    "then": {"properties": {"b": {"type": ["integer", "null"]}}},
                },
            ],
        },
    },
}
VALUES = ["x:y", "x@y", "x@y:z", 1, [1], {"k": []}, ["s"]]
KEYS = ["a", "b", "c", "k"]  # VALUES include objects with a key "k"


def _objects():
    return small_objects(KEYS, VALUES, [VALUES[:3], VALUES[3:]])


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_overlapping_object_alternatives_are_exact(name):
    schema = SCHEMAS[name]
    objects = _objects()
    if schema["type"] == "array":
        instances = [[o] for o in objects] + [["a"], ["c"], [1], []]
    else:
        instances = [{"a": o} for o in objects] + [{"a": "s"}, {"a": 1}, {}]
    wrong, valid = disagreements(schema, instances)
    assert wrong == [], wrong[:5]
    assert 0 < valid < len(instances)


def test_shared_keys_that_one_alternative_alone_allows_are_refused():
    """Objects of shared keys only that exactly one alternative allows ({} here: only the first
    requires nothing) cannot be dropped: the oneOf is refused, not approximated."""
    schema = {
        "type": "array",
        "items": {"oneOf": [_closed(a=STRING, s={}), {**_closed(b=STRING, s={}), "required": ["s"]}]},
    }
    assert jsonschema.Draft202012Validator(schema).is_valid([{}])
    with pytest.raises(ConstraintError, match="oneOf"):
        schema_to_grammar(schema)


def test_a_not_that_says_more_than_a_list_does_not_exclude():
    """{"not": {"enum": ["ab"], "minLength": 5}} holds of "ab": both alternatives allow {"a": "ab"},
    which oneOf then rejects; the alternatives are not told apart by that `not` (refused)."""
    negated = {"type": "string", "not": {"enum": ["ab"], "minLength": 5}}
    alternatives = [
        {
            "type": "object",
            "properties": {"a": {"const": "ab"}},
            "additionalProperties": {"type": "array"},
            "required": ["a"],
        },
        {"type": "object", "properties": {"a": negated}, "required": ["a"]},
    ]
    schema = {"type": "array", "items": {"oneOf": alternatives}}
    assert not jsonschema.Draft202012Validator(schema).is_valid([{"a": "ab"}])
    with pytest.raises(ConstraintError, match="oneOf"):
        schema_to_grammar(schema)

    from sgl_runtime.constrained.json_schema.object_union import _disjoint_values
    from sgl_runtime.constrained.json_schema.refs import RefResolver
    from sgl_runtime.constrained.json_schema.shapes import Shapes

    class Builder:
        shapes = Shapes(RefResolver(schema))

    listed = {"const": "ab"}
    assert not _disjoint_values(Builder, listed, negated)
    assert _disjoint_values(Builder, listed, {"type": "string", "not": {"enum": ["ab", "c"]}})
