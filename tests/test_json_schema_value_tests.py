"""Conditions that read key values beside `properties` in the grammar form (presence.py value
tests, value_tests.py): `if: {"properties": {"plan": {"const": "team"}}}`, discriminators in
`allOf` of `if`/`then`, `then` constraining another key's value. The language agrees with
jsonschema on random objects, and what cannot be split exactly is refused naming the keywords."""

from __future__ import annotations

import json
import random

import pytest
from jsonschema import Draft202012Validator

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.language import compile_schema, schema_to_grammar
from sgl_runtime.constrained.json_schema.schema_grammar import SchemaGrammar
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

FREE = {}  # a free-form value: the schema takes the grammar form

SUBSCRIPTION = {
    "type": "object",
    "properties": {"plan": {"type": "string", "maxLength": 8}, "seats": {"type": "integer"}, "meta": FREE},
    "required": ["plan"],
    "if": {"properties": {"plan": {"const": "team"}}, "required": ["plan"]},
    "then": {"required": ["seats"]},
}
STEP = {  # woodpecker-ci's commands step
    "type": "object",
    "properties": {
        "image": {"type": "string"},
        "detach": {"type": "boolean"},
        "commands": {"type": "array", "items": {"type": "string"}},
        "entrypoint": {"type": "string"},
        "meta": FREE,
    },
    "required": ["image"],
    "additionalProperties": False,
    "allOf": [
        {
            "if": {"properties": {"detach": {"const": True}}},
            "then": {},
            "else": {"anyOf": [{"required": ["commands"]}, {"required": ["entrypoint"]}]},
        }
    ],
}
CLUSTER = {  # CloudFormation RDS DBCluster: then constrains another key's value
    "type": "object",
    "properties": {"Engine": {"type": "string"}, "User": {"type": "string"}, "Tags": FREE},
    "allOf": [
        {
            "if": {"properties": {"Engine": {"enum": ["aurora-postgresql", "postgresql"]}}, "required": ["Engine"]},
            "then": {"properties": {"User": {"not": {"enum": ["admin"]}}}},
        }
    ],
}
FORM_ITEM = {  # github-issue-forms: one key read by several tests
    "type": "object",
    "properties": {"type": {"enum": ["markdown", "textarea", "input", "other"]}, "id": {"type": "string"}, "x": FREE},
    "required": ["type"],
    "allOf": [
        {"if": {"properties": {"type": {"const": "markdown"}}}, "then": {"not": {"required": ["id"]}}},
        {"if": {"properties": {"type": {"const": "textarea"}}}, "then": {"required": ["id"]}},
        {"if": {"properties": {"type": {"const": "input"}}}, "then": {"required": ["x"]}},
    ],
}
LOOSE = {  # a test on a free-form key: objects and arrays all fail `const`
    "type": "object",
    "properties": {"kind": FREE, "n": {"type": "integer"}},
    "if": {"properties": {"kind": {"const": "x"}}, "required": ["kind"]},
    "then": {"required": ["n"]},
    "else": {"not": {"required": ["n"]}},
}

POOLS = {
    "plan": ["team", "solo", "teams", 3],
    "seats": [1, "2"],
    "meta": [None, {"a": [1, {"b": {}}]}, [[[]]]],
    "image": ["alpine", 7],
    "detach": [True, False, "true"],
    "commands": [["ls"], [], "ls"],
    "entrypoint": ["sh", None],
    "Engine": ["postgresql", "aurora-postgresql", "mysql", 1],
    "User": ["admin", "root", ""],
    "Tags": [{"k": ["v"]}, []],
    "type": ["markdown", "textarea", "input", "other", "none"],
    "id": ["a", 1],
    "x": [{}, [1, [2]], "s"],
    "kind": ["x", "y", {"x": "x"}, ["x"], None],
    "n": [1, 2.5],
    "other": [1],
}


def _instances(schema: dict, rng: random.Random, n: int):
    keys = list(schema["properties"]) + ["other"]
    for _ in range(n):
        yield {k: rng.choice(POOLS[k]) for k in keys if rng.random() < 0.55}


@pytest.mark.parametrize(
    "schema", [SUBSCRIPTION, STEP, CLUSTER, FORM_ITEM, LOOSE], ids=["subscription", "step", "cluster", "form", "loose"]
)
def test_value_conditions_agree_with_jsonschema(schema):
    grammar = compile_schema(schema)
    assert isinstance(grammar, SchemaGrammar)
    validator = Draft202012Validator(schema)
    rng, valid = random.Random(3), 0
    for value in _instances(schema, rng, 600):
        text = json.dumps(value, separators=(",", ":"))
        expected = validator.is_valid(value)
        assert grammar.accepts(text) == expected, text
        valid += expected
    assert 20 < valid < 580


def test_value_conditions_through_the_qwen_vocabulary():
    """Compiled for a real vocabulary, the masks let a text through (every token allowed, accepted
    at the end) exactly where the condition holds."""
    tok = load_qwen2_tokenizer()
    constraint = compile_constraint("json_schema", SUBSCRIPTION, tok)
    for text, ok in [('{"plan":"team","seats":4}', True), ('{"plan":"team"}', False), ('{"plan":"free"}', True)]:
        matcher, walked = constraint.matcher(), True
        for token in tok.encode(text, add_special_tokens=False):
            walked = bool(int(matcher.bitmask()[token // 32]) >> (token % 32) & 1)
            if not walked:
                break
            matcher.advance(token)
        assert (walked and matcher.is_accepting()) == ok, text


@pytest.mark.parametrize(
    "schema, match",
    [
        (  # the token `1` begins `12`: the split integers would compete
            {
                "type": "object",
                "properties": {"n": {"type": "integer"}, "m": FREE},
                "if": {"properties": {"n": {"const": 1}}, "required": ["n"]},
                "then": {"required": ["m"]},
            },
            "if .value tests.: the grammar form cannot tell the alternatives apart",
        ),
    ],
)
def test_value_conditions_the_grammar_form_cannot_split_are_refused(schema, match):
    with pytest.raises(ConstraintError, match=match):
        schema_to_grammar(schema)


def test_too_many_value_tests_fall_back_to_the_rules_without_them():
    """Past the object's 12 condition bits, value tests are dropped and the schema is compiled (or
    refused) as without them: the draft-07 metaschema's `properties` inside `if`s stay compiled."""
    keys = [f"k{i}" for i in range(13)]
    schema = {
        "type": "object",
        "properties": {k: {"type": "string"} for k in keys} | {"free": FREE},
        "allOf": [{"if": {"properties": {k: {"const": "x"}}}, "then": {"required": ["free"]}} for k in keys],
    }
    with pytest.raises(ConstraintError, match=r"properties and allOf: .*cannot combine.*\(object: more than 12 keys"):
        schema_to_grammar(schema)
    from jsonschema import Draft7Validator

    assert isinstance(compile_schema(Draft7Validator.META_SCHEMA), SchemaGrammar)
