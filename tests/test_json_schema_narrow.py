"""Subschemas narrowed to one category for the grammar form (narrow.py): an `if`/`not` that the
category alone decides, and keywords of other categories, no longer keep an object or array from
being one automaton or one rule. Exact against jsonschema; the schemas are the shapes of real
schemas that were refused before (CloudFormation's IAM policy and RDS cluster, its update policy).
Arrays constrained in several places are one array rule (array_merge.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from schema_verdicts import disagreements

from sgl_runtime.constrained.json_schema.language import schema_to_grammar
from sgl_runtime.constrained.json_schema.narrow import narrowed
from sgl_runtime.constrained.json_schema.serialize import compact_json

BOOLEAN = {"enum": ["true", "false", True, False]}
SCHEMAS = {
    # arrays: the `if` admits no array (its `else` holds), so the allOf is of two closed arrays
    "if_on_arrays": {
        "$defs": {
            "Boolean": BOOLEAN,
            "Booleans": {
                "type": ["string", "array", "boolean"],
                "if": {"type": ["string", "boolean"]},
                "then": {"$ref": "#/$defs/Boolean"},
                "items": {"$ref": "#/$defs/Boolean", "type": ["string", "boolean"]},
            },
        },
        "type": "object",
        "additionalProperties": {
            "allOf": [
                {"$ref": "#/$defs/Booleans"},
                {"items": {"type": "string"}, "type": ["boolean", "string", "array"]},
            ]
        },
    },
    # no `type`: on arrays the object keywords and the `if` over an object's keys say nothing
    "object_conditions_on_arrays": {
        "properties": {"E": {"type": "string"}, "U": {"type": "string"}, "v": {}},
        "additionalProperties": False,
        "allOf": [
            {"properties": {"U": {"not": {"enum": ["root"]}}}},
            {
                "if": {"properties": {"E": {"enum": ["pg"]}}, "required": ["E"]},
                "then": {"properties": {"U": {"not": {"enum": ["admin"]}}}},
            },
        ],
    },
    # on objects a `not` of strings holds; on strings it does not
    "not_of_scalars_on_objects": {
        "type": ["object", "string"],
        "properties": {"v": {}},
        "not": {"enum": ["AWS::A", "AWS::B"]},
    },
}
SCALARS = [1, "pg", "admin", "root", "true", "false", True, False, None, "AWS::A", "AWS::C", 2.5]
KEYS = ["E", "U", "v", "k"]


def _instances():
    """Scalars, arrays of scalars, and objects of up to three keys (a value nesting free-form
    containers under "v")."""
    out: list = list(SCALARS) + [[], [[1]], [{"E": "pg"}]]
    out += [[a, b] for a, b in itertools.product(SCALARS[:8], repeat=2)]
    for n in range(4):
        for keys in itertools.permutations(KEYS, n):
            for value in ("pg", "admin", "root", True, ["true", "false"], ["x"]):
                out.append({k: ({"deep": [[{"a": [1]}]]} if k == "v" else value) for k in keys})
    out += [{"k": ["true", False]}, {"k": ["true", 1]}, {"k": []}, {"k": "false"}, {"k": "no"}]
    return out


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_narrowed_schemas_compile_exactly(name):
    schema = SCHEMAS[name]
    instances = _instances()
    wrong, valid = disagreements(schema, instances)
    assert wrong == [], wrong[:5]
    assert valid > 20 and len(instances) - valid > 20


class _Builder:
    """What narrowed() reads of a GrammarBuilder."""

    def __init__(self, document) -> None:
        from sgl_runtime.constrained.json_schema.grammar_form import GrammarBuilder
        from sgl_runtime.constrained.json_schema.refs import RefResolver
        from sgl_runtime.constrained.json_schema.shapes import Shapes

        class Comp:  # as json_schema/compiler.py's _Compiler sets them
            refs = RefResolver(document)
            widen_wildcards = '"unevaluated' not in json.dumps(document)

        self.comp, self.shapes = Comp, Shapes(Comp.refs)
        self.trivial = lambda schema, c: GrammarBuilder.trivial(self, schema, c)


def test_narrowing_reads_the_category():
    schema = {"not": {"enum": ["a"]}, "minLength": 2, "if": {"type": "string"}, "then": {"required": ["x"]}}
    b = _Builder(schema)
    assert narrowed(b, schema, "object") == {}  # `not` holds, the `if` fails, minLength says nothing
    assert narrowed(b, schema, "array") == {}
    assert narrowed(b, {"not": {"type": "array"}}, "array") is False
    kept = {"type": "object", "required": ["x"]}
    assert narrowed(b, kept, "object") is kept  # nothing to narrow: the schema itself
    # an `if` over keys stays on objects, where it is decided per object
    both = {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "items": {"type": "string"}}
    assert narrowed(b, both, "object") == {"if": {"required": ["a"]}, "then": {"required": ["b"]}}
    assert narrowed(b, both, "array") == {"items": {"type": "string"}}


def test_nothing_is_narrowed_where_unevaluated_keywords_read_annotations():
    schema = {"anyOf": [{"properties": {"a": {}}}, {"type": "array"}], "unevaluatedProperties": False}
    inner = schema["anyOf"][0]
    b = _Builder(schema)
    assert narrowed(b, schema, "object") is schema
    assert narrowed(b, inner, "array") is inner


def test_dependent_required_keys_are_serialized_after_the_declared_ones():
    """The compiler takes keys named by dependentRequired in any order after the declared keys
    (objects.py); compact_json writes them there, so valid instances walk."""
    schema = {
        "type": "object",
        "properties": {"P": {"type": "string"}, "S": {"type": "string"}, "U": {"type": "string"}},
        "dependentRequired": {"P": ["U"]},
        "additionalProperties": False,
    }
    text = compact_json({"P": "x", "S": "s", "U": "u"}, schema)
    assert text == '{"S":"s","P":"x","U":"u"}'
    language = schema_to_grammar(schema)
    assert language.accepts(text)
    assert not language.accepts('{"S":"s","P":"x"}')


ARRAY_CONJUNCTIONS = {
    # a `then` that tightens an array property (CloudFormation's DynamoDB AttributeDefinitions)
    "min_items_beside_a_ref": {
        "$defs": {"defs": {"type": "array", "items": {"type": "object", "properties": {"k": {}}}}},
        "type": "object",
        "properties": {"v": {"allOf": [{"$ref": "#/$defs/defs"}, {"minItems": 2, "maxItems": 3}]}},
    },
    # a oneOf of one member is that member (Dependabot's ignore lists, an allOf of two such)
    "single_member_one_of": {
        "type": "object",
        "properties": {
            "v": {
                "allOf": [
                    {"oneOf": [{"type": "array", "items": {"type": ["integer", "object"]}, "minItems": 1}]},
                    {
                        "allOf": [
                            {"anyOf": [{"type": "array", "items": {"not": {"type": "object", "required": ["j"]}}}]}
                        ]
                    },
                ]
            }
        },
    },
    # items of two conjuncts, prefixItems of one, uniqueItems of the other
    "items_and_prefix": {
        "type": "object",
        "properties": {
            "v": {
                "allOf": [
                    {"prefixItems": [{"type": "integer"}], "items": {"type": ["integer", "array"]}},
                    {"items": {"not": {"type": "string"}}, "uniqueItems": True},
                ]
            }
        },
    },
}


@pytest.mark.parametrize("name", sorted(ARRAY_CONJUNCTIONS))
def test_arrays_constrained_in_several_places_are_one_rule(name):
    schema = ARRAY_CONJUNCTIONS[name]
    items = [1, 2, "s", [1], {"k": [[]]}, {"j": 1}]
    arrays = [[]] + [list(x) for n in (1, 2, 3, 4) for x in itertools.product(items, repeat=n) if n < 4 or x[0] == 1]
    wrong, valid = disagreements(schema, [{"v": value} for value in arrays])
    assert wrong == [], wrong[:5]
    assert 10 < valid < len(arrays)
