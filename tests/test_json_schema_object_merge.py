"""Objects constrained in several places (allOf members, $ref targets, own keywords) in the grammar form:
one object rule over the conjunction (object_merge.py), exact against jsonschema."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from jsonschema import Draft202012Validator

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema import grammar_form, object_merge
from sgl_runtime.constrained.json_schema.language import compile_schema
from sgl_runtime.constrained.json_schema.schema_grammar import SchemaGrammar
from sgl_runtime.constrained.json_schema.serialize import compact_json

BY_ALTERNATIVE = (
    "one of two kinds beside a base",
    "if/then on one key's value",
    "if/then on a key's value or its absence",
)  # anyOf/oneOf branches as object rules of their own
TREE = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}
CASES = {
    "base and extension": (
        {
            "$defs": {
                "base": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}, "meta": {}},
                    "required": ["id"],
                },
                "tree": TREE,
            },
            "allOf": [
                {"$ref": "#/$defs/base"},
                {
                    "properties": {
                        "name": {"type": "string", "maxLength": 3},
                        "id": {"maximum": 5},
                        "tree": {"$ref": "#/$defs/tree"},
                    },
                    "patternProperties": {"^x": {"type": "integer"}},
                    "additionalProperties": {"type": ["integer", "boolean"]},
                },
                {"required": ["name"], "maxProperties": 4, "not": {"required": ["name", "meta"]}},
            ],
        },
        {
            "id": [1, 6, "1"],
            "name": ["ab", "abcd", 1],
            "tags": [[], [1, {"a": [2]}]],
            "meta": [None, {"q": [[[]]]}, 3, True],
            "tree": [{"kids": [{"kids": []}, {}]}, {"kids": [1]}],
            "xy": [3, True],
            "z": [True, "s"],
        },
        ("id", "name"),
    ),
    "many keys beside a closed member": (
        {
            "type": "object",
            "properties": {
                "a": {},
                "b": {"type": "integer"},
                "free": {},
                **{f"p{i}": {"minimum": 0} for i in range(10)},
            },
            "allOf": [
                {
                    "properties": {
                        "a": {"type": "string"},
                        "c": {},
                        "free": {},
                        **{f"p{i}": {"type": "integer"} for i in range(10)},
                    },
                    "additionalProperties": False,
                },
                {"required": ["a"], "dependentRequired": {"c": ["zz"]}},
            ],
        },
        {
            "a": ["s", 1],
            "b": [1],
            "c": [{"x": [1]}, None],
            "free": [[{"y": {}}]],
            "d": [1],
            "p0": [1, -1, "x"],
            "p7": [2],
        },
        ("a",),
    ),
    "key names and counts from several members": (
        {
            "$defs": {"any": {"properties": {"v": {}}, "propertyNames": {"maxLength": 2}}},
            "type": "object",
            "minProperties": 1,
            "allOf": [
                {"$ref": "#/$defs/any"},
                {"propertyNames": {"pattern": "^[a-c]"}, "maxProperties": 2},
                {"patternProperties": {"^b": {"type": "string"}}},
            ],
        },
        {"a": [{"k": [1]}], "bb": ["s", 2], "c": [[]], "abc": [1], "v": [1]},
        (),
    ),
    "one of two kinds beside a base": (
        {
            "type": "object",
            "properties": {
                "kind": {"enum": ["a", "b", "c"]},
                "data": {},
                **{f"p{i}": {"type": "integer"} for i in range(8)},
            },
            "required": ["kind"],
            "allOf": [
                {
                    "oneOf": [
                        {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
                        {"properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
                    ]
                }
            ],
        },
        {"kind": ["a", "b", "c"], "data": [[{"z": 1}]], "x": [1, "s"], "y": ["s", 1], "p0": [1, "s"]},
        ("kind",),
    ),
    "if/then on one key's value": (
        {
            "$defs": {
                "A": {
                    "properties": {"type": {}, "x": {"type": "integer"}, "tags": {"type": "array"}},
                    "required": ["x"],
                    "additionalProperties": False,
                },
                "B": {"properties": {"type": {}, "y": {"type": "string"}, "meta": {}}, "additionalProperties": False},
            },
            "type": "object",
            "properties": {"type": {"enum": ["a", "b", "c", "d"]}},
            "required": ["type"],
            "allOf": [
                {"if": {"properties": {"type": {"const": "a"}}, "required": ["type"]}, "then": {"$ref": "#/$defs/A"}},
                {
                    "if": {"properties": {"type": {"enum": ["b", "c"]}}, "required": ["type"]},
                    "then": {"$ref": "#/$defs/B"},
                    "else": {"properties": {"y": False}},
                },
            ],
        },
        {
            "type": ["a", "b", "c", "d", "e"],
            "x": [1, "s"],
            "y": ["s", 1],
            "tags": [[1, [2]]],
            "meta": [{"q": [{}]}],
            "z": [1],
        },
        ("type",),
    ),
    "if/then on a key's value or its absence": (
        {
            "$defs": {"A": {"properties": {"x": {"type": "integer"}, "deep": {}}, "required": ["x"]}},
            "type": "object",
            "properties": {"mode": {"type": "string"}, "other": {}},
            "allOf": [
                {"if": {"properties": {"mode": {"const": "a"}}}, "then": {"$ref": "#/$defs/A"}},
                {
                    "if": {
                        "oneOf": [
                            {"properties": {"mode": {"const": "b"}}, "required": ["mode"]},
                            {"not": {"required": ["mode"]}},
                        ]
                    },
                    "then": {"properties": {"y": {"type": "string"}, "deep": {"type": "array"}}, "required": ["y"]},
                    "else": {"properties": {"y": False}},
                },
            ],
        },
        {"mode": ["a", "b", "c"], "x": [1, "s"], "y": ["s", 1], "deep": [[{"k": []}], {"k": 1}], "other": [[[]]]},
        (),
    ),
    "recursive node": (
        {
            "$defs": {
                "named": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
                "node": {
                    "allOf": [
                        {"$ref": "#/$defs/named"},
                        {"properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "x": {}}},
                    ]
                },
            },
            "$ref": "#/$defs/node",
        },
        {
            "name": ["n", 1],
            "kids": [[], [{"name": "m"}], [{"kids": []}], [{"name": "m", "kids": [{"name": "o", "x": [[]]}]}]],
            "x": [{"deep": [[[{}]]]}],
        },
        ("name",),
    ),
}


def _instances(pools: dict, required: tuple, n: int = 300, seed: int = 0) -> list[dict]:
    """Objects of up to 2 optional keys, usually with the required keys (first candidates: valid)."""
    rng = random.Random(seed)
    optional = sorted(k for k in pools if k not in required)
    out = []
    for size in [0, 1, 2] * 6:
        for chosen in itertools.combinations(optional, size):
            instance = {k: pools[k][0] if rng.random() < 0.6 else rng.choice(pools[k]) for k in required}
            if rng.random() < 0.1 and instance:
                instance.pop(rng.choice(sorted(instance)))
            instance.update({k: pools[k][0] if rng.random() < 0.5 else rng.choice(pools[k]) for k in chosen})
            out.append(instance)
    rng.shuffle(out)
    return out[:n]


@pytest.fixture
def merges(monkeypatch):
    """The symbols merged_object returned while compiling (NOT_MERGED left out)."""
    made: list = []

    def spy(b, schema):
        symbol = object_merge.merged_object(b, schema)
        if symbol is not object_merge.NOT_MERGED:
            made.append(symbol)
        return symbol

    monkeypatch.setattr(grammar_form, "merged_object", spy)
    return made


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_conjunction_is_exact(case, merges):
    schema, pools, required = CASES[case]
    language = compile_schema(schema)
    assert isinstance(language, SchemaGrammar) and merges  # the grammar form, through the merge
    validator = Draft202012Validator(schema)
    valid = 0
    for instance in _instances(pools, required):
        expected = validator.is_valid(instance)
        valid += expected
        text = compact_json(instance, schema)
        if case in BY_ALTERNATIVE:  # declared keys differ between alternatives: some order of the keys
            assert _in_some_order(language, text) == expected, (case, instance)
        else:
            assert language.accepts(text) == expected, (case, instance)
            assert expected or not _in_some_order(language, text), (case, instance)
    assert valid >= 10, valid  # the cases exercise both outcomes


def _in_some_order(language, text: str) -> bool:
    """Whether `language` accepts the object `text` with its top-level members in some order."""
    members = list(json.loads(text).items())
    return any(
        language.accepts(json.dumps(dict(order), separators=(",", ":"), ensure_ascii=False))
        for order in itertools.permutations(members)
    )


@pytest.mark.parametrize(
    "case",
    [
        "base and extension",
        "recursive node",
        "many keys beside a closed member",
        "one of two kinds beside a base",
        "if/then on one key's value",
        "if/then on a key's value or its absence",
    ],
)
def test_without_the_merge_these_are_refused(case, monkeypatch):
    """Mutation check: the merge is what makes these compile."""
    monkeypatch.setattr(grammar_form, "merged_object", lambda b, schema: object_merge.NOT_MERGED)
    with pytest.raises(ConstraintError):
        compile_schema(CASES[case][0], max_work_states=20_000)  # the depth-bounded fallback refuses quickly


def test_declared_keys_come_in_the_order_of_their_first_declaration():
    few = CASES["recursive node"][0]
    language = compile_schema(few)
    assert language.accepts('{"name":"a","x":1}') and not language.accepts('{"x":1,"name":"a"}')
    many = CASES["base and extension"][0]
    language = compile_schema(many)
    # declared: id, tags, meta (the $ref target's), then name, tree: written in that order, then the others
    assert compact_json({"xy": 1, "name": "a", "id": 1}, many) == '{"id":1,"name":"a","xy":1}'
    assert language.accepts('{"id":1,"name":"a","xy":1}')
    assert not language.accepts('{"name":"a","id":1,"xy":1}')


def test_a_member_beyond_object_keywords_is_left_to_the_other_rules():
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {}}},
            {"properties": {"b": {}}, "enum": [{"a": 1}, {"b": [2]}]},
        ]
    }
    found = object_merge.conjuncts(grammar_form.Shapes(None), {"properties": {"a": {}}})
    assert found == ([{"properties": {"a": {}}}], [])
    language = compile_schema(schema)  # the enum makes it one automaton
    assert language.accepts('{"a":1}') and not language.accepts('{"a":2}')
    assert json.loads('{"b":[2]}') in schema["allOf"][1]["enum"]


def test_the_key_that_tells_if_then_cases_apart_is_written_first(merges):
    schema = {
        "$defs": {
            "X": {
                "properties": {"a": {}, "kind": {}, "n": {"type": "integer"}},
                "required": ["n"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {"a": {}, "kind": {"type": "string"}},
        "required": ["kind"],
        "allOf": [
            {"if": {"properties": {"kind": {"const": "x"}}}, "then": {"$ref": "#/$defs/X"}},
            {"if": {"properties": {"kind": {"const": "y"}}}, "then": {"properties": {"a": {"type": "array"}}}},
        ],
    }
    language = compile_schema(schema)
    assert isinstance(language, SchemaGrammar) and merges
    assert language.accepts('{"kind":"x","a":{"deep":[{}]},"n":1}') and not language.accepts('{"kind":"x","a":1}')
    assert language.accepts('{"kind":"y","a":[[]]}') and not language.accepts('{"kind":"y","a":{}}')
    assert language.accepts('{"kind":"z","a":{}}')
    assert not language.accepts('{"a":[],"kind":"y"}')  # kind first: its value token picks the case
