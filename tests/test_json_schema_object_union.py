"""anyOf / oneOf over several object alternatives in the grammar form (object_union.py): the
language agrees with jsonschema on recursive condition trees and on discriminated unions with
free-form payloads, sampling through the Qwen2.5 vocabulary only yields valid instances, and
what the grammar form cannot keep exact (overlapping oneOf alternatives, alternatives whose terminals
the lexer cannot tell apart) is refused naming the keyword. Alternatives the LALR(1) parser cannot
tell apart by the next token are followed each way (grammar/forking.py)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from schema_verdicts import disagreements, small_objects
from tiny_vocab import mask_bits

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.language import compile_schema, schema_to_grammar
from sgl_runtime.constrained.json_schema.schema_grammar import SchemaGrammar
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer


def _tree(part: str) -> dict:
    def node(key, value):
        return {"type": "object", "additionalProperties": False, "properties": {key: value}, "required": [key]}

    conds = {"type": "array", "items": {"$ref": "#/$defs/cond"}, "maxItems": 3}
    return {
        "$defs": {
            "cond": {
                part: [
                    {"$ref": "#/$defs/and"},
                    {"$ref": "#/$defs/or"},
                    {"$ref": "#/$defs/not"},
                    {"type": "string", "maxLength": 3},
                ]
            },
            "and": node("and", conds),
            "or": node("or", conds),
            "not": node("not", {"$ref": "#/$defs/cond"}),
        },
        "$ref": "#/$defs/cond",
    }


SHAPES = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}, "meta": {}},
            "required": ["kind", "r"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"kind": {"enum": ["square", "box"]}, "side": {"type": "integer"}, "meta": {}},
            "required": ["kind", "side"],
            "additionalProperties": False,
        },
    ]
}


def _random_tree(rng: random.Random, depth: int = 0):
    pick = rng.randrange(7 if depth < 3 else 3)
    if pick == 0:
        return rng.choice(["a", "bc", "defg", ""])
    if pick == 1:
        return rng.choice([1, None, [], {}])
    if pick == 2:
        return {rng.choice(["and", "or", "xor"]): [_random_tree(rng, depth + 1) for _ in range(rng.randrange(3))]}
    if pick == 3:
        return {"not": _random_tree(rng, depth + 1)}
    if pick == 4:
        return {"and": [_random_tree(rng, depth + 1) for _ in range(rng.randrange(5))]}
    if pick == 5:
        return {"not": _random_tree(rng, depth + 1), "or": []}  # two keys: in no alternative
    return {"or": [_random_tree(rng, depth + 1) for _ in range(rng.randrange(3))]}


def _random_shape(rng: random.Random):
    kind = rng.choice(["circle", "square", "box", "star", None])
    wants = {"circle": "r", "square": "side", "box": "side"}.get(kind)
    value = {} if kind is None else {"kind": kind}
    for key, options in (("r", [1, 2.5, "x"]), ("side", [3, 1.5]), ("meta", [None, {"a": [1, {"b": []}]}, "m"])):
        if rng.random() < (0.85 if key == wants else 0.5 if key == "meta" else 0.15):
            value[key] = rng.choice(options)
    return value


@pytest.mark.parametrize(
    "schema, generate",
    [(_tree("anyOf"), _random_tree), (_tree("oneOf"), _random_tree), (SHAPES, _random_shape)],
    ids=["tree-anyOf", "tree-oneOf", "shapes-oneOf"],
)
def test_object_unions_agree_with_jsonschema(schema, generate):
    grammar = compile_schema(schema)
    assert isinstance(grammar, SchemaGrammar)  # recursion / free-form payloads: the grammar form
    validator = Draft202012Validator(schema)
    rng, verdicts = random.Random(1), []
    for _ in range(400):
        value = generate(rng)
        text = json.dumps(value, separators=(",", ":"))
        verdicts.append(validator.is_valid(value))
        assert grammar.accepts(text) == verdicts[-1], text
    assert 40 < sum(verdicts) < 360


@pytest.fixture(scope="module")
def qwen():
    tok = load_qwen2_tokenizer()
    return tok, Vocabulary.from_tokenizer(tok)


@pytest.mark.parametrize("schema", [_tree("oneOf"), SHAPES, "same first key"], ids=["tree", "shapes", "late"])
def test_sampling_object_unions_through_qwen_yields_valid_instances(qwen, schema):
    schema = LATE[schema] if isinstance(schema, str) else schema
    tok, vocab = qwen
    constraint = compile_constraint("json_schema", schema, tok)
    validator = Draft202012Validator(schema)
    favoured = [
        i
        for i, b in enumerate(vocab.token_bytes)
        if b and len(b) <= 6 and set(b) <= set(b'andortcilesquarbxkmdh",:{}[]0123.')
    ]
    rng, done = random.Random(0), 0
    for _ in range(10):
        matcher, ids = constraint.matcher(), []
        for _step in range(120):
            allowed = np.flatnonzero(mask_bits(matcher.bitmask(), vocab.size))
            assert allowed.size, tok.decode(ids)
            allowed_set = set(allowed.tolist()) - set(vocab.eos_token_ids)
            if vocab.eos_token_ids[0] in allowed and (not allowed_set or len(ids) > 30 or rng.random() < 0.3):
                break
            pick = [i for i in favoured if i in allowed_set] or sorted(allowed_set)
            if len(ids) > 40:  # then steer towards an end
                pick = [i for i in pick if vocab.token_bytes[i] in (b"}", b"]", b'"', b"1")] or pick
            for probe in rng.sample(pick, min(6, len(pick))):  # mask and scalar step agree
                assert constraint.step(matcher.state, probe) is not None
            token = rng.choice(pick)
            matcher.advance(token)
            ids.append(token)
        if matcher.is_accepting():
            text = tok.decode(ids)
            assert validator.is_valid(json.loads(text)), text
            done += 1
    assert done >= 5


SELF = {"type": "array", "items": {"$ref": "#"}}  # recursion: the grammar form


def _closed_self(key: str, **more) -> dict:
    return {"type": "object", "properties": {key: SELF, **more}, "additionalProperties": False}


@pytest.mark.parametrize(
    "schema, match",
    [
        (  # {"a": 1, "b": 2} matches both
            {
                "oneOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}, "p": SELF}},
                    {"type": "object", "properties": {"b": {"type": "integer"}, "p": SELF}},
                ]
            },
            "oneOf: 2 alternatives allow objects and the grammar form cannot show that they exclude",
        ),
        (  # the key "a" with an integer in one, a number in the other: `1` begins `1.5`
            {
                "anyOf": [
                    _closed_self("b", a={"type": "integer"}),
                    _closed_self("c", a={"type": "number", "maximum": 5}),
                ]
            },
            "anyOf: the grammar form cannot tell the alternatives apart",
        ),
    ],
)
def test_unions_the_grammar_form_cannot_keep_exact_are_refused(schema, match):
    """(compile_schema then falls back to one automaton with its documented depth bound.)"""
    with pytest.raises(ConstraintError, match=match):
        schema_to_grammar(schema)


LATE = {
    # both allow {}: the parser cannot choose at `}` (two parses of one text)
    "both allow {}": {"anyOf": [_closed_self("a"), _closed_self("b")]},
    # the first key and its value are the same in both; which alternative shows at a later key
    "same first key": {
        "oneOf": [
            {**_closed_self("x", a={"type": "string"}, k=SELF), "required": ["x"]},
            {**_closed_self("y", a={"type": "string"}, k=SELF), "required": ["y"]},
        ]
    },
    # any key in the first, the key "a" in the second: the key terminals share the text `"a":`, so
    # they are split into `"a":` and the other keys (grammar/refine.py)
    "free keys beside a named key": {
        "anyOf": [
            {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1},
            {"type": "object", "properties": {"a": SELF}, "required": ["a"], "additionalProperties": False},
        ]
    },
    # the same key with a value of another kind in each, then keys of their own
    "same key, other values": {
        "anyOf": [_closed_self("b", a={"type": "string"}), _closed_self("c", a={"type": "array", "items": SELF})]
    },
}
LATE_KEYS = ["a", "b", "k", "x", "y"]
LATE_VALUES = ["s", [], [{}], [{"a": []}], 1, 2]  # SELF's items are the root schema's values


@pytest.mark.parametrize("name", sorted(LATE))
def test_alternatives_the_parser_tells_apart_late_are_exact(name):
    """Object alternatives whose rules share a first pair, or objects, are LALR(1) conflicts: each
    way is followed (grammar/forking.py), and the language agrees with jsonschema on every object of
    up to three keys."""
    schema = LATE[name]
    assert isinstance(schema_to_grammar(schema), SchemaGrammar)
    wrong, valid = disagreements(schema, small_objects(LATE_KEYS, LATE_VALUES, [["s", [], 1], [[{}], "s", []]]))
    assert wrong == [], wrong[:5]
    assert valid >= 7


def test_unique_items_over_alternatives_whose_key_terminals_were_split():
    """Items compared as JSON values (keys in any order) of a union whose free-key and named-key
    terminals share `"a":`, split by grammar/refine.py: repeats are still found."""
    union = LATE["free keys beside a named key"]
    schema = {
        "type": "array",
        "uniqueItems": True,
        "items": {
            **union,
            "anyOf": [union["anyOf"][0], {**union["anyOf"][1], "properties": {"a": {"type": "array", "maxItems": 0}}}],
        },
    }
    items = [{"a": 1}, {"a": []}, {"b": 2, "a": 1}, {"a": 1, "b": 2}, {"c": 3}, {}]
    instances = [[x, y] for x in items for y in items] + [[x] for x in items]
    assert isinstance(schema_to_grammar(schema), SchemaGrammar)
    wrong, valid = disagreements(schema, instances)
    assert wrong == [], wrong[:5]
    assert 10 < valid < len(instances) - 10


def test_strict_lalr_refuses_a_shift_reduce_conflict_lark_would_resolve_silently():
    """The check's parser table: lark resolves a shift/reduce conflict as shift unless strict
    (which would quietly drop the text only the reduction leads to)."""
    from sgl_runtime.constrained.grammar.source import build_lark

    dangling_else = 'start: "if" start | "if" start "else" start | "x"\n'
    build_lark(dangling_else)
    with pytest.raises(ConstraintError, match="Shift/Reduce"):
        build_lark(dangling_else, strict=True)


def _closed(props: dict, **keywords) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": props, **keywords}


EXCLUSIVE = {
    # one key of {when, unless}, or any one other key: propertyNames rules the first out
    "property names": {
        "oneOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": "^[a-z]+$", "not": {"pattern": "^(when|unless)$"}},
                "maxProperties": 1,
                "additionalProperties": SELF,
            },
            _closed({"when": SELF, "unless": SELF}, minProperties=1, maxProperties=1),
        ]
    },
    # the same required key, an object in one and a string in the other
    "value kinds": {
        "oneOf": [
            _closed({"d": _closed({"x": SELF})}, required=["d"]),
            _closed({"d": {"type": "string"}, "e": SELF}, required=["d"]),
        ]
    },
    # a branch that is itself a oneOf, against a reference object whose key it never allows
    "nested oneOf": {
        "oneOf": [
            {
                "oneOf": [
                    _closed({"kind": {"const": "a"}, "n": SELF}, required=["kind"]),
                    _closed({"kind": {"const": "b"}, "n": SELF}, required=["kind"]),
                ]
            },
            _closed({"$ref": {"type": "string"}}, required=["$ref"]),
        ]
    },
}
POOL = [
    *({}, {"when": []}, {"unless": [[]]}, {"foo": []}, {"when": [], "foo": []}, {"foo": [], "bar": []}, {"Foo": []}),
    *({"d": {}}, {"d": "s"}, {"d": {"x": []}}, {"d": "s", "e": []}, {"d": {"x": []}, "e": []}, {"e": []}),
    *({"kind": "a"}, {"kind": "b", "n": []}, {"$ref": "x"}, {"$ref": "x", "kind": "a"}, {"kind": "c"}, {"n": []}),
    *([], "s", 1, None),
]


@pytest.mark.parametrize("name", sorted(EXCLUSIVE))
def test_one_of_alternatives_shown_to_exclude_each_other_compile_exactly(name):
    """oneOf alternatives that exclude each other by what their keys may be (propertyNames, a
    required key's kind of value, keys a nested oneOf never allows) compile to the grammar form,
    and the language agrees with jsonschema."""
    schema = EXCLUSIVE[name]
    built, validator = schema_to_grammar(schema), Draft202012Validator(schema)
    assert isinstance(built, SchemaGrammar)
    verdicts = [validator.is_valid(value) for value in POOL]
    assert 3 <= sum(verdicts) < len(POOL) - 3
    for value, valid in zip(POOL, verdicts):
        assert built.accepts(json.dumps(value, separators=(",", ":"))) == valid, value
