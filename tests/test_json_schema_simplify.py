"""Applicators that always hold are left out before compiling (json_schema/simplify.py): an anyOf
with a member of annotations only (CloudFormation's unknown formats and relationshipRef beside a
long string) no longer makes the string's automaton too large, and nothing that could change a
verdict is left out."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft7Validator, Draft202012Validator

from sgl_runtime.constrained.json_schema.drafts import to_latest
from sgl_runtime.constrained.json_schema.language import compile_schema
from sgl_runtime.constrained.json_schema.simplify import always_holds, without_trivial_applicators

KMS_KEY = {  # AWS::Logs::LogGroup's KmsKeyId, as CloudFormation's registry ships it
    "$schema": "https://schema.cloudformation.us-east-1.amazonaws.com/provider.definition.schema.v1.json",
    "anyOf": [
        {"format": "AWS::KMS::Key.Arn"},
        {"relationshipRef": {"typeName": "AWS::KMS::Key", "propertyPath": "/properties/Arn"}},
    ],
    "maxLength": 2048,
    "minLength": 1,
    "pattern": "^arn:[a-z0-9-]+:kms:[a-z0-9-]+:\\d{12}:(key|alias)/.+\\Z",
    "type": "string",
}


def test_a_long_string_beside_annotation_only_alternatives_compiles_exactly():
    built, validator = compile_schema(KMS_KEY), Draft7Validator(KMS_KEY)
    for value in (
        "arn:aws:kms:us-east-1:123456789012:key/abc",
        "arn:aws:kms:us-east-1:123456789012:alias/" + "x" * 1990,
        "arn:aws:kms:us-east-1:123456789012:alias/" + "x" * 2010,  # too long
        "arn:aws:kms:us-east-1:12345678901:key/abc",
        "",
        "key/abc",
    ):
        assert built.accepts(json.dumps(value)) == validator.is_valid(value), value[:60]


@pytest.mark.parametrize(
    "schema, holds",
    [
        (True, True),
        ({}, True),
        ({"format": "AWS::KMS::Key.Arn", "description": "d", "relationshipRef": {"typeName": "T"}}, True),
        ({"format": "date"}, False),  # a format the compiler enforces
        ({"type": "string"}, False),
        ({"$defs": {"a": {}}}, False),  # a $ref elsewhere could name what it holds
        ({"$anchor": "a"}, False),
        ({"$ref": "#/$defs/any"}, False),
        (False, False),
    ],
)
def test_what_always_holds(schema, holds):
    assert always_holds(schema) == holds


@pytest.mark.parametrize(
    "schema, pool",
    [
        ({"type": "string", "anyOf": [{"format": "x-unknown"}, {"minLength": 3}]}, ["", "ab", "abcd", 1]),
        ({"allOf": [{"title": "t"}, {"minLength": 3}], "type": "string"}, ["", "ab", "abcd", 1]),
        ({"anyOf": [{"format": "date"}, {"maxLength": 1}], "type": "string"}, ["2020-01-01", "2020-13-01", "a", "ab"]),
        ({"oneOf": [{"title": "a"}, {"title": "b"}]}, ["a", 1, None]),  # oneOf of two: nothing is valid
    ],
)
def test_the_language_is_unchanged(schema, pool):
    built = compile_schema(schema)
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)  # formats enforced
    for value in pool:
        assert built.accepts(json.dumps(value)) == validator.is_valid(value), value


def test_nothing_is_left_out_where_it_could_change_a_verdict():
    always = {"anyOf": [{"title": "t"}, {"properties": {"a": {}}}]}
    assert "anyOf" not in to_latest({"type": "object", **always})
    # the other member's evaluated properties count for unevaluatedProperties
    kept = {"type": "object", **always, "unevaluatedProperties": False}
    assert without_trivial_applicators(kept) is kept
    built = compile_schema(kept, lenient=True)
    assert built.accepts('{"a":1}') == Draft202012Validator(kept).is_valid({"a": 1})
    # a $ref into an anyOf member would move
    pointed = {"$defs": {"x": always}, "$ref": "#/$defs/x/anyOf/1"}
    assert without_trivial_applicators(pointed) is pointed
    # a schema with nothing to leave out is the very same object (caches keyed by identity)
    plain = {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
    assert to_latest(plain) is plain
    deep: dict = {}
    for _ in range(3000):
        deep = {"not": deep}
    assert to_latest(deep) is deep  # too deep to print: left to the compiler, which refuses it clearly
