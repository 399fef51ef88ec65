"""`if`/`then`/`else` on objects whose test reads inside a container value (if_split.py): the
objects become two alternatives, those that pass the `if` (with `then`) and those that fail it (with
`else`), followed together by the parser until a value tells them apart. Exact against jsonschema
on every object of up to three keys; the shapes are GitHub Actions' `runs.using`, Mergify's
`source.manual`, Dependabot's beta-ecosystems flag and OpenAPI 3.1's `X-or-reference`, which the grammar
form refused before."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator
from schema_verdicts import disagreements, small_objects

from sgl_runtime.constrained.json_schema.if_split import failing
from sgl_runtime.constrained.json_schema.language import schema_to_grammar
from sgl_runtime.constrained.json_schema.schema_grammar import SchemaGrammar

SELF = {"type": "array", "items": {"$ref": "#"}}  # recursion: the grammar form
USING = {"type": "object", "properties": {"using": {"enum": ["composite", "node"]}, "s": SELF}}
SCHEMAS = {
    "runs.using": {
        "type": "object",
        "properties": {"runs": USING, "outputs": {}, "s": SELF},
        "if": {"properties": {"runs": {"type": "object", "properties": {"using": {"const": "composite"}}}}},
        "then": {"properties": {"outputs": {"type": "array"}}},
        "else": {"properties": {"outputs": {"type": "string"}}},
    },
    "source.manual": {
        "type": "object",
        "properties": {"source": {"type": ["object", "string"]}, "cap": {}, "s": SELF},
        "if": {"properties": {"source": {"required": ["manual"], "type": "object"}}, "required": ["source"]},
        "else": {"properties": {"cap": {"type": "integer"}}},
    },
    "o.k required": {  # once refused in tests/test_json_schema_value_tests.py
        "type": "object",
        "properties": {"o": {"type": "object", "properties": {"k": SELF}}, "m": SELF},
        "if": {"properties": {"o": {"required": ["k"]}}},
        "then": {"required": ["m"]},
    },
    "or-reference": {  # OpenAPI 3.1's X-or-reference: nothing but the if, over two large objects
        "$defs": {
            "reference": {
                "type": "object",
                "properties": {"$ref": {"type": "string"}, "summary": {"type": "string"}},
                "required": ["$ref"],
                "additionalProperties": False,
            },
            "item": {"type": "object", "properties": {"summary": {"type": "integer"}, "get": {"$ref": "#"}}},
        },
        "if": {"type": "object", "required": ["$ref"]},
        "then": {"$ref": "#/$defs/reference"},
        "else": {"$ref": "#/$defs/item"},
    },
    "a flag in allOf": {
        "type": "object",
        "properties": {"beta": {"type": "boolean"}, "updates": {"type": "array", "items": {"type": "object"}}},
        "allOf": [
            {
                "if": {"properties": {"beta": {"const": True}}, "required": ["beta"]},
                "then": {},
                "else": {"properties": {"updates": {"items": {"properties": {"eco": {"enum": ["a"]}}}}}},
            },
            {"properties": {"s": SELF}},
        ],
    },
}
VALUES = {
    "runs.using": [{"using": "composite"}, {"using": "node"}, {}, {"using": "x"}, [], "s", 1],
    "source.manual": [{"manual": 1}, {}, {"other": 1}, "s", 1, []],
    "a flag in allOf": [True, False, [{"eco": "a"}], [{"eco": "b"}], [{}], [], 1],
    "o.k required": [{"k": []}, {}, {"j": 1}, [], [{}], "s"],
    "or-reference": ["x", 1, {}, {"$ref": "y"}, [], {"get": 2}],
}
KEYS = {
    "runs.using": ["runs", "outputs", "s"],
    "source.manual": ["source", "cap"],
    "a flag in allOf": ["beta", "updates"],
    "o.k required": ["o", "m"],
    "or-reference": ["$ref", "summary", "get"],
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_conditions_reading_inside_a_value_are_exact(name):
    schema = SCHEMAS[name]
    assert isinstance(schema_to_grammar(schema), SchemaGrammar)
    values = VALUES[name]
    wrong, valid = disagreements(schema, small_objects(KEYS[name], values, [values[:3], values[3:6]]))
    assert wrong == [], wrong[:5]
    assert valid > 5


TESTS = [
    {"properties": {"using": {"const": "composite"}}},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"enum": [1, 2]}}}}},
    {"required": ["a", "b"], "properties": {"a": {"minLength": 2}}},
    {"type": ["object", "string"], "required": ["a"]},
    {"const": True},
]
POOL = [
    {},
    {"using": "composite"},
    {"using": "x"},
    {"a": {"b": 1}},
    {"a": {"b": 3}},
    {"a": 1},
    {"a": "xy", "b": 0},
    {"a": "x", "b": 0},
    {"b": 1},
    "s",
    True,
    1,
    None,
    [],
]


@pytest.mark.parametrize("test", TESTS, ids=str)
def test_failing_admits_exactly_the_values_that_fail_the_test(test):
    fails = Draft202012Validator(failing(None, test))
    passes = Draft202012Validator(test)
    assert [fails.is_valid(v) for v in POOL] == [not passes.is_valid(v) for v in POOL]


def test_a_test_that_applies_to_items_is_not_split():
    assert failing(None, {"properties": {"a": {"items": {"const": 1}}}}) is None


def test_a_ref_beside_the_if_resolves_where_it_was_written():
    """The split's halves hold the schema without its `if`; a `$ref` there resolves against the
    resource it was written in (here one with its own `$id`), not the document's root."""
    job = {
        "$id": "https://example.com/job",
        "$defs": {"base": {"type": "object", "properties": {"runs": USING, "outputs": {}, "s": SELF}}},
        "$ref": "#/$defs/base",
        "if": {"properties": {"runs": {"type": "object", "properties": {"using": {"const": "composite"}}}}},
        "then": {"properties": {"outputs": {"type": "array"}}},
        "else": {"properties": {"outputs": {"type": "string"}}},
    }
    schema = {"$defs": {"job": job}, "type": "array", "items": {"$ref": "#/$defs/job"}}
    values = VALUES["runs.using"]
    objects = small_objects(["runs", "outputs"], values, [values[:3], values[3:6]])
    wrong, valid = disagreements(schema, [[o] for o in objects])
    assert wrong == [], wrong[:5]
    assert valid > 5
