"""uniqueItems over a few item values is exact (every array of up to 3 items from a pool, and of 4 from a smaller one, with
duplicates and equal-but-differently-typed values agrees with jsonschema); elsewhere it is refused
with a ConstraintError naming uniqueItems and why, or ignored under lenient=True."""

import itertools
import json

import pytest
from jsonschema import Draft202012Validator

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa

POOL = ["a", "b", "", True, False, 0, 1, 2, None, {"k": 1}, {"k": [True]}, [1], [], "x"]
ARRAYS = [list(a) for n in range(4) for a in itertools.product(POOL, repeat=n)]
ARRAYS += [list(a) for a in itertools.product(["a", "x", True, 0, None, [1]], repeat=4)]


@pytest.mark.parametrize(
    "schema",
    [
        {"items": {"enum": ["a", "b", "x"]}},
        {"items": {"type": "boolean"}, "minItems": 1},
        {"items": {"enum": [1, 1.0, 2, True, 0, False, None, {"k": 1}, {"k": [True]}, [1], []]}},
        {"prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "items": False},
        {"prefixItems": [{"const": "a"}, {"enum": ["a", "b"]}], "items": {"enum": ["a", "b", "x"]}},
        {"items": {"enum": ["a", "b", "x"]}, "contains": {"const": "x"}, "maxItems": 2},
        {"items": {"type": ["boolean", "null"]}, "minItems": 2},
        {"items": {"anyOf": [{"type": "null"}, {"enum": [0, 1, 2]}]}, "maxItems": 3},
        {"prefixItems": [{"const": 1}], "items": {"type": "string"}, "maxItems": 1},  # cannot fail
    ],
)
def test_unique_items_agree_with_jsonschema(schema):
    schema = {"type": "array", "uniqueItems": True, **schema}
    dfa, validator = schema_to_dfa(schema), Draft202012Validator(schema)
    accepted = 0
    for array in ARRAYS:
        if any(isinstance(v, float) for v in array):
            continue
        text = json.dumps(array, separators=(",", ":"))
        valid = validator.is_valid(array)
        assert dfa.accepts(text) == valid, text
        accepted += valid
    assert accepted > 0


def test_unique_items_under_not_is_exact():
    schema = {"not": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}}
    dfa = schema_to_dfa(schema)
    assert dfa.accepts("[true,true]") and dfa.accepts('"s"') and not dfa.accepts("[true,false]")


@pytest.mark.parametrize(
    "schema, why",
    [
        ({"items": {"type": "string"}}, "infinitely or too many spellings"),
        ({}, "infinitely or too many spellings"),
        ({"items": {"enum": list(range(13))}}, "13 distinct values"),
        ({"items": {"type": "integer", "minimum": 0, "maximum": 100}}, "101 distinct values"),
    ],
)
def test_unique_items_refusals_name_the_keyword_and_why(schema, why):
    with pytest.raises(ConstraintError, match=r"uniqueItems: unsupported \(.*" + why):
        schema_to_dfa({"type": "array", "uniqueItems": True, **schema})
    lenient = schema_to_dfa({"type": "array", "uniqueItems": True, **schema}, lenient=True)
    assert lenient.accepts("[]")
