"""`$dynamicRef` / `$recursiveRef` whose target the document fixes (json_schema/dynamic_refs.py):
the 2019-09 and 2020-12 metaschemas and a schema extending a tree through `$dynamicAnchor` compile
to the grammar form, with jsonschema's verdicts on instances that only the dynamic target decides;
where the target depends on the path taken, the reference is still refused by name."""

from __future__ import annotations

import json

import jsonschema
import pytest
from jsonschema_specifications import REGISTRY

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.dynamic_refs import static_dynamic_refs
from sgl_runtime.constrained.json_schema.language import compile_schema, schema_to_grammar
from sgl_runtime.constrained.json_schema.serialize import compact_json

SCHEMAS_AS_INSTANCES = [
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}, "required": ["a"]},
    {"$defs": {"n": {"type": "integer", "minimum": 0}}, "items": {"$ref": "#/$defs/n"}, "maxItems": 3},
    {"anyOf": [{"const": 1}, {"enum": ["x", None]}], "not": {"type": "boolean"}},
    {"properties": {"a": {"properties": {"b": {"properties": {"c": {"type": ["string", "null"]}}}}}}},
    {"properties": {"a": {"properties": {"b": {"properties": {"c": {"type": "strin"}}}}}}},  # deep, invalid
    {"properties": {"a": {"items": {"minLength": -1}}}},
    {"properties": {"a": {"additionalProperties": {"required": "x"}}}},
    {"$defs": {"x": {"enum": 3}}},
    {"type": 5},
    {"allOf": [{"maxLength": 2}, {"minimum": "1"}]},
    {"dependentRequired": {"a": ["b", 3]}},
    True,
    {"prefixItems": [{"type": "null"}, {"pattern": "^a"}], "items": False},
]


def _metaschema(url: str):
    return REGISTRY.contents(url)


@pytest.mark.parametrize(
    "url",
    ["https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema"],
)
def test_metaschemas_compile_with_their_dynamic_references_and_agree_with_jsonschema(url):
    meta = _metaschema(url)
    grammar = schema_to_grammar(meta)  # refused ("$dynamicRef"/"$recursiveRef") before
    validator = jsonschema.validators.validator_for(meta)(meta)
    verdicts = set()
    for instance in SCHEMAS_AS_INSTANCES:
        text = compact_json(instance, meta)  # keys in the order the metaschema declares them
        expected = validator.is_valid(instance)
        assert grammar.accepts(text) == expected, (url, text, expected)
        verdicts.add(expected)
    assert verdicts == {True, False}


TREE = {
    "$id": "https://example.com/strict-tree",
    "$dynamicAnchor": "node",
    "$ref": "tree",
    "required": ["data"],
    "$defs": {
        "tree": {
            "$id": "https://example.com/tree",
            "$dynamicAnchor": "node",
            "type": "object",
            "properties": {
                "data": {"type": "integer"},
                "children": {"type": "array", "items": {"$dynamicRef": "#node"}},
            },
        }
    },
}


def test_a_tree_extended_through_its_dynamic_anchor_binds_children_to_the_entry_schema():
    """The children of the tree must satisfy the entry schema (which requires `data`), not only the
    tree schema the reference is written in: that is what the dynamic scope decides here."""
    language = compile_schema(TREE)
    validator = jsonschema.Draft202012Validator(TREE)
    cases = [
        {"data": 1},
        {"data": 1, "children": [{"data": 2}, {"data": 3, "children": []}]},
        {"data": 1, "children": [{"children": []}]},  # a child without data: only the dynamic target rejects it
        {"data": 1, "children": [{"data": 2, "children": [{}]}]},
        {"children": []},
    ]
    for value in cases:
        text = json.dumps(value, separators=(",", ":"))
        assert language.accepts(text) == validator.is_valid(value), text
    assert not validator.is_valid(cases[2]) and validator.is_valid(cases[1])


def test_a_dynamic_reference_whose_target_depends_on_the_path_is_refused_by_name():
    """Two resources define the anchor and the entry schema does not: which one is outermost
    depends on the way in, so the reference is not rewritten."""
    schema = {
        "$id": "https://example.com/root",
        "properties": {"a": {"$ref": "first"}, "b": {"$ref": "second"}},
        "$defs": {
            "first": {"$id": "first", "$dynamicAnchor": "n", "items": {"$dynamicRef": "#n"}, "type": "array"},
            "second": {"$id": "second", "$dynamicAnchor": "n", "$ref": "first", "maxItems": 1},
        },
    }
    assert static_dynamic_refs(schema) is schema
    with pytest.raises(ConstraintError, match=r"\$dynamicRef"):
        schema_to_grammar(schema)


def test_the_rewrite_leaves_the_given_schema_untouched():
    before = json.dumps(TREE, sort_keys=True)
    bundled = static_dynamic_refs(TREE)
    assert bundled is not TREE and json.dumps(TREE, sort_keys=True) == before
    assert "$dynamicRef" not in json.dumps(bundled)
