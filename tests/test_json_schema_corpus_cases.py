"""Valid values the real-world corpus once had rejected (docs/benchmarks.md, issue 14), as small
schemas: each is accepted now, and the values around it that are invalid stay rejected."""

import json

from jsonschema import Draft202012Validator

from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa


def _agree(schema, valid, invalid, **options):
    dfa, validator = schema_to_dfa(schema, **options), Draft202012Validator(schema)
    for value in valid:
        assert validator.is_valid(value) and dfa.accepts(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    for value in invalid:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert not validator.is_valid(value) and not dfa.accepts(text), text


def test_a_control_character_in_a_pattern_constrained_string():
    """cfn AWS_MediaLive_*: an ARN pattern's `.+` matches U+000B, spelled \\u000b in JSON."""
    arn = {"type": "string", "pattern": "^arn:.+:medialive:.+:group:.+$"}
    _agree(arn, ["arn:a:medialive:b:group:L\x0b", "arn:\x01:medialive:b:group:\x1f"], ["arn:a:medialive:b:group:\n"])
    _agree({"type": "string", "maxLength": 3}, ["\x00\x0b\x1f", "a\b"], ["\x00\x0b\x1fx"])


def test_a_free_form_object_deeper_than_the_nesting_depth_is_at_least_flat():
    """cfn AWS_Glue_Table: `Parameters: {"type": ["object", "string"]}` four objects down."""
    free = {"type": ["object", "string"]}
    schema = {"properties": {"a": {"properties": {"b": {"properties": {"c": free}}}}}}
    _agree(schema, [{"a": {"b": {"c": {}}}}, {"a": {"b": {"c": {"k": 1, "l": "x"}}}}], [{"a": {"b": {"c": 1}}}])
    dfa = schema_to_dfa(schema)
    assert not dfa.accepts('{"a":{"b":{"c":{"k":{}}}}}')  # deeper than one level of its own: rejected
    assert not schema_to_dfa(schema, max_nesting_depth=0).accepts('{"a":{"b":{"c":{}}}}')
