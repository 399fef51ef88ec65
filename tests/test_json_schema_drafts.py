"""`$schema` is honoured: each draft's keywords mean what that draft says, checked against
jsonschema's validator for the declared draft on valid and invalid instances."""

import json

import pytest
from jsonschema import validators

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa

URIS = {
    "draft-04": "http://json-schema.org/draft-04/schema#",
    "draft-06": "http://json-schema.org/draft-06/schema#",
    "draft-07": "http://json-schema.org/draft-07/schema#",
    "2019-09": "https://json-schema.org/draft/2019-09/schema",
    "2020-12": "https://json-schema.org/draft/2020-12/schema",
}
CASES = [  # (schema without $schema, instances)
    (
        {
            "type": "object",
            "properties": {"cylindrical": {"type": "boolean"}, "axis": {"type": "string"}},
            "dependencies": {"cylindrical": ["axis"]},
        },
        [{}, {"cylindrical": True}, {"cylindrical": True, "axis": "z"}, {"axis": "z"}],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependencies": {"a": {"properties": {"b": {"minimum": 5}}}},
        },
        [{"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 7}, {"b": 2}],
    ),
    (
        {"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False},
        [[], [1], [1, "a"], [1, "a", 2], ["a"], [1, 2]],
    ),
    (
        {"type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "boolean"}},
        [[1], [1, True], [1, 2], [True]],
    ),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}},
        [[1], [1, True], [1, 2], [True], ["x"]],
    ),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "dependentRequired": {"a": ["b"]}},
        [{"a": 1}, {"a": 1, "b": 2}, {}],
    ),
    (
        {
            "definitions": {"n": {"type": "integer", "minimum": 3}},
            "type": "object",
            "properties": {"x": {"$ref": "#/definitions/n"}},
        },
        [{"x": 4}, {"x": 1}, {"x": "a"}],
    ),
    ({"type": "number", "maximum": 5, "exclusiveMaximum": True}, [4, 5, 6]),
    ({"type": "integer", "minimum": 5, "exclusiveMinimum": False}, [4, 5, 6]),
    ({"type": "integer", "exclusiveMinimum": 5}, [4, 5, 6]),
    ({"type": "string", "const": "a"}, ["a", "b"]),
    (
        {
            "type": "object",
            "properties": {"x": {"$ref": "#/definitions/s", "maxLength": 1}},
            "definitions": {"s": {"type": "string"}},
        },
        [{"x": "ab"}, {"x": 1}],
    ),
    ({"if": {"type": "integer"}, "then": {"minimum": 3}}, [1, 5, "a"]),
]


def _valid_combinations():
    """(draft, case) pairs whose schema is valid under that draft's metaschema (a boolean
    exclusiveMaximum is not a draft-07 schema, an array `items` not a 2020-12 one)."""
    for draft, uri in URIS.items():
        for case, (body, _) in enumerate(CASES):
            schema = {"$schema": uri, **body}
            if validators.validator_for(schema).META_SCHEMA and _schema_ok(schema):
                yield draft, case


def _schema_ok(schema) -> bool:
    try:
        validators.validator_for(schema).check_schema(schema)
    except Exception:
        return False
    return True


COMBINATIONS = list(_valid_combinations())


def test_every_case_runs_under_several_drafts():
    assert len(COMBINATIONS) >= 50 and {d for d, _ in COMBINATIONS} == set(URIS)


@pytest.mark.parametrize("draft, case", COMBINATIONS)
def test_each_draft_means_what_its_validator_says(draft, case):
    body, instances = CASES[case]
    schema = {"$schema": URIS[draft], **body}
    validator = validators.validator_for(schema)(schema)
    assert (
        validator.__class__
        is {
            "draft-04": validators.Draft4Validator,
            "draft-06": validators.Draft6Validator,
            "draft-07": validators.Draft7Validator,
            "2019-09": validators.Draft201909Validator,
            "2020-12": validators.Draft202012Validator,
        }[draft]
    )
    try:
        dfa = schema_to_dfa(schema)
    except ConstraintError as exc:
        pytest.fail(f"{draft} refused {body}: {exc}")
    for instance in instances:
        text = json.dumps(instance, separators=(",", ":"))
        assert dfa.accepts(text) == validator.is_valid(instance), (draft, body, text)


def test_draft4_ids_and_anchors_resolve():
    schema = {
        "$schema": URIS["draft-04"],
        "id": "http://example.com/root.json",
        "properties": {"id": {"$ref": "#item"}},
        "definitions": {"i": {"id": "#item", "type": "integer"}},
    }
    dfa = schema_to_dfa(schema)
    assert dfa.accepts('{"id":3}') and not dfa.accepts('{"id":"3"}')


def test_unknown_draft_and_draft4_integral_floats_are_refused():
    with pytest.raises(ConstraintError, match=r"\$schema: unsupported metaschema"):
        schema_to_dfa({"$schema": "http://json-schema.org/draft-03/schema#"})
    # a custom metaschema whose URI merely contains a draft's name may drop vocabularies
    with pytest.raises(ConstraintError, match=r"\$vocabulary"):
        schema_to_dfa({"$schema": "http://localhost:1234/draft2020-12/metaschema-no-validation.json", "minimum": 1})
    for uri in ("http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-04/schema#"):
        assert schema_to_dfa({"$schema": uri, "type": "boolean"}).accepts("true")
    with pytest.raises(ConstraintError, match="draft-04 does not count 1.0"):
        schema_to_dfa({"$schema": URIS["draft-04"], "type": "integer"}, integral_floats=True)


def test_a_property_named_default_is_a_schema_refs_can_reach():
    """`default` / `enum` as names in properties or definitions are schemas, not instance values:
    a $ref inside them resolves against the root's $id (check-jsonschema's codecov schema)."""
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://example.invalid/codecov",
        "definitions": {"default": {"type": "integer"}},
        "properties": {"default": {"$ref": "#/definitions/default"}, "enum": {"$ref": "#/definitions/default"}},
    }
    dfa = schema_to_dfa(schema)
    assert dfa.accepts('{"default":1,"enum":2}')
    assert not dfa.accepts('{"default":"a"}') and not dfa.accepts('{"enum":[]}')


def test_cloudformation_provider_schemas_are_draft_07():
    """AWS CloudFormation resource schemas declare the provider definition metaschema, which extends
    draft-07 with annotations only: they are read as draft-07 (`dependencies`, `$ref` siblings)."""
    uri = "https://schema.cloudformation.us-east-1.amazonaws.com/provider.definition.schema.v1.json"
    schema = {
        "$schema": uri,
        "typeName": "AWS::Example::Thing",
        "type": "object",
        "properties": {"A": {"type": "string"}, "B": {"$ref": "#/definitions/B", "maxLength": 1}},
        "definitions": {"B": {"type": "string"}},
        "dependencies": {"A": ["B"]},
        "additionalProperties": False,
    }
    dfa = schema_to_dfa(schema)
    assert dfa.accepts('{"A":"x","B":"long"}') and not dfa.accepts('{"A":"x"}') and dfa.accepts('{"B":"y"}')
    with pytest.raises(ConstraintError, match=r"\$schema: unsupported metaschema"):
        schema_to_dfa({**schema, "$schema": uri.replace("provider", "other")})


META_CASES = [
    # (schema with a $ref into an official metaschema, instances)
    ({"$ref": "http://json-schema.org/draft-07/schema#/definitions/simpleTypes"}, ["integer", "date", 1, "null"]),
    ({"$ref": "http://json-schema.org/draft-07/schema#/definitions/nonNegativeInteger"}, [0, 7, -1, 1.5, "1"]),
    # draft-04's exclusiveMaximum is a boolean; the metaschema is read as draft-04 whatever the root declares
    ({"$ref": "http://json-schema.org/draft-04/schema#/properties/exclusiveMaximum"}, [True, False, 1, None]),
    (
        {
            "type": "object",
            "properties": {"n": {"$ref": "http://json-schema.org/draft-04/schema#/definitions/positiveInteger"}},
        },
        [{"n": 0}, {"n": 3}, {"n": -2}, {"n": "x"}, {}],
    ),
    (
        {"$ref": "https://json-schema.org/draft/2020-12/meta/validation#/$defs/simpleTypes"},
        ["array", "object", "date", 1],
    ),
]


@pytest.mark.parametrize("schema, instances", META_CASES)
def test_refs_into_the_official_metaschemas_resolve_offline(schema, instances):
    """As jsonschema resolves them (from the copies jsonschema-specifications ships)."""
    validator = validators.validator_for(schema)(schema)
    dfa = schema_to_dfa(schema)
    for instance in instances:
        text = json.dumps(instance, separators=(",", ":"))
        assert dfa.accepts(text) == validator.is_valid(instance), (schema, text)


def test_metaschemas_resolve_over_https_too():
    """json-schema.org serves the draft-04 to -07 metaschemas at https as well (their ids say http)."""
    https = schema_to_dfa({"$ref": "https://json-schema.org/draft-07/schema#/definitions/nonNegativeInteger"})
    http = schema_to_dfa({"$ref": "http://json-schema.org/draft-07/schema#/definitions/nonNegativeInteger"})
    assert all(https.accepts(t) == http.accepts(t) for t in ("0", "7", "-1", "1.5", '"1"'))


def test_a_metaschema_ref_is_the_whole_draft_07_metaschema():
    from sgl_runtime.constrained.json_schema.language import compile_schema

    schema = {"type": "object", "properties": {"schema": {"$ref": "http://json-schema.org/draft-07/schema#"}}}
    validator = validators.validator_for(schema)(schema)
    language = compile_schema(schema)
    inners = ({"type": "string"}, {"type": "strin"}, {"minLength": -1}, {"required": ["a", "a"]}, True, 3)
    for inner in inners + ({"items": [{"type": "null"}], "maxItems": 2}, {"properties": {"a": {"enum": [1, 1]}}}):
        text = json.dumps({"schema": inner}, separators=(",", ":"))
        assert language.accepts(text) == validator.is_valid({"schema": inner}), text


def test_other_remote_refs_are_refused_without_fetching():
    for ref in ("https://example.com/other.json#/a", "http://json-schema.org/draft-99/schema#", "file:///etc/passwd"):
        with pytest.raises(ConstraintError, match="cannot resolve remote reference.*nothing is fetched"):
            schema_to_dfa({"type": "object", "properties": {"a": {"$ref": ref}}})
