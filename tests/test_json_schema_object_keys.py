"""Objects whose undeclared keys count never write a key twice.

`{"a":1,"a":2}` is one property once loaded (Python's json keeps the last value), so where undeclared
keys count towards `minProperties`, or where objects are items compared by value under
`uniqueItems`, the grammar form tracks each object's keys and rejects a repeated one; masks leave
out the tokens after which a key can only end as a repeat.
"""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from tiny_vocab import make_vocab, mask_bits, masks_allow_exactly

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.compiler import build_dfa, wrap_built
from sgl_runtime.constrained.json_schema.grammar_form import SchemaGrammar
from sgl_runtime.constrained.json_schema.language import compile_schema
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer


def _repeats_a_key(text: str) -> bool:
    def walk(value) -> bool:
        if isinstance(value, list) and value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
            return len({k for k, _ in value}) < len(value) or any(walk(v) for _, v in value)
        return isinstance(value, list) and any(walk(v) for v in value)

    return walk(json.loads(text, object_pairs_hook=lambda pairs: [tuple(p) for p in pairs]))


def _texts(keys, values, up_to: int):
    """Compact objects of up to `up_to` members over these keys (repeats included) and values."""
    for n in range(up_to + 1):
        for chosen in itertools.product(keys, repeat=n):
            for vals in itertools.product(values, repeat=n):
                yield "{" + ",".join(f'"{k}":{v}' for k, v in zip(chosen, vals)) + "}"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "minProperties": 2},  # free-form: the grammar form already
        {"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}},  # was one automaton
        {"type": "object", "properties": {"x": {"type": "integer"}}, "minProperties": 2},
        {"type": "object", "propertyNames": {"enum": ["a", "b", "x"]}, "minProperties": 2, "maxProperties": 3},
        {"type": "object", "patternProperties": {"^[ab]": {"type": "integer"}}, "minProperties": 2},
    ],
)
def test_min_properties_counts_each_key_once(schema):
    """The language is that of jsonschema on the loaded value, less every text that writes a key
    twice: `{"a":1,"a":2}` no longer passes minProperties 2 (it did when members were counted as written)."""
    built, validator = compile_schema(schema), Draft202012Validator(schema)
    assert isinstance(built, SchemaGrammar)
    accepted = rejected = 0
    for text in _texts(["a", "b", "x"], ["1", '"s"'], 3):
        if "properties" in schema and '"x"' in text and not text.startswith('{"x"'):
            continue  # declared keys come first (key_order "properties")
        expected = not _repeats_a_key(text) and validator.is_valid(json.loads(text))
        assert built.accepts(text) == expected, text
        accepted, rejected = accepted + expected, rejected + (not expected)
    assert built.accepts('{"a":1,"b":{"c":1,"c":2}}') is False  # nested free-form objects too
    assert accepted > 10 and rejected > 10


def test_unique_items_compare_objects_without_repeated_keys():
    """Items compared as JSON values: `{"a":1,"a":2}` would load as `{"a":2}`, a repeat of the next item."""
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "object"}}
    built = compile_schema(schema)
    assert not built.accepts('[{"a":1,"a":2},{"a":2}]')
    assert not built.accepts('[{"a":1,"a":2}]')
    assert built.accepts('[{"a":1,"b":2},{"a":2}]')
    assert not built.accepts('[{"a":1,"b":2},{"b":2,"a":1}]')


def test_min_properties_that_only_the_automaton_can_take_counts_as_written():
    """The grammar form cannot complement rules (dependentSchemas): the flat automaton still takes
    the schema, counting members as written (documented), rather than refusing it."""
    schema = {"dependentSchemas": {"k": {"minProperties": 3}}}
    built = compile_schema(schema)
    assert not isinstance(built, SchemaGrammar)
    assert built.accepts('{"k":1,"a":1,"b":1}') and not built.accepts('{"k":1,"a":1}')


# Tokens that split a key anywhere, finish one with its colon, or write a whole member.
KEY_TOKENS = [
    "{",
    "}",
    '"',
    "a",
    "b",
    '"a',
    'a"',
    'b"',
    '":',
    ":",
    "1",
    ",",
    ',"',
    '"a":',
    ',"a":',
    'a":1',
    "1}",
    '"b":1',
]


@pytest.mark.parametrize("min_properties", [2, 3])
def test_masks_allow_exactly_the_prefixes_of_objects_without_repeated_keys(min_properties):
    """Every valid object here can be listed (distinct keys, in any order, value 1): a token is
    allowed iff some valid object starts with the text so far plus the token. With three keys
    and minProperties 3, the last key can only be the one not yet written."""
    keys = ["a", "b", "ab"]
    tracked = {
        "type": "object",
        "minProperties": min_properties,
        "propertyNames": {"enum": keys},
        "additionalProperties": {"const": 1},
    }
    valid = {
        "{" + ",".join(f'"{k}":1' for k in chosen) + "}"
        for n in range(min_properties, len(keys) + 1)
        for chosen in itertools.permutations(keys, n)
    }
    constraint = wrap_built(*build_dfa("json_schema", tracked, {})[:1], make_vocab(KEY_TOKENS), "json_schema")
    assert masks_allow_exactly(constraint, KEY_TOKENS, valid, steps=9, frontier_cap=400) > 1000


@pytest.fixture(scope="module")
def qwen():
    tok = load_qwen2_tokenizer()
    return tok, Vocabulary.from_tokenizer(tok)


ENUM_VALUES = {"enum": [0, 1, "a", [1]]}
AB_KEYS = {"pattern": "^[ab]{1,2}$"}


@pytest.mark.parametrize(
    "schema, options",
    [
        (
            {
                "type": "object",
                "minProperties": 4,
                "maxProperties": 6,
                "propertyNames": AB_KEYS,
                "additionalProperties": ENUM_VALUES,
            },
            {},
        ),
        ({"type": "object", "minProperties": 3, "additionalProperties": {"type": "integer", "maximum": 9}}, {}),
        (
            {
                "type": "object",
                "minProperties": 3,
                "maxProperties": 4,
                "propertyNames": AB_KEYS,
                "additionalProperties": ENUM_VALUES,
            },
            {"whitespace": 2},
        ),
        (
            {
                "type": "array",
                "uniqueItems": True,
                "minItems": 3,
                "maxItems": 4,
                "items": {"type": "object", "maxProperties": 3, "additionalProperties": ENUM_VALUES},
            },
            {},
        ),
    ],
)
def test_sampling_through_qwen_never_repeats_a_key(qwen, schema, options):
    """Random walks through the masks, favouring short tokens of a tiny alphabet so that repeated
    keys are likely, end as valid instances without a repeated key; the mask agrees with the
    scalar step on the allowed tokens tried."""
    tok, vocab = qwen
    constraint = compile_constraint("json_schema", schema, tok, **options)
    validator = Draft202012Validator(schema)
    favoured = [i for i, b in enumerate(vocab.token_bytes) if b and len(b) <= 4 and set(b) <= set(b'ab01",:{}[] ')]
    rng, finished = random.Random(0), 0
    for _ in range(10):
        matcher, ids = constraint.matcher(), []
        for _step in range(200):
            allowed = np.flatnonzero(mask_bits(matcher.bitmask(), vocab.size))
            assert allowed.size, tok.decode(ids)
            allowed_set = set(allowed.tolist()) - set(vocab.eos_token_ids)
            if vocab.eos_token_ids[0] in allowed and (rng.random() < 0.5 or not allowed_set):
                break
            pick = [i for i in favoured if i in allowed_set] or sorted(allowed_set)
            for probe in rng.sample(pick, min(8, len(pick))):
                assert constraint.step(matcher.state, probe) is not None
            token = rng.choice(pick)
            matcher.advance(token)
            ids.append(token)
        else:
            continue  # no room left to finish: a walk this long proves nothing more
        text = tok.decode(ids)
        assert matcher.is_accepting(), text
        assert not _repeats_a_key(text), text
        assert validator.is_valid(json.loads(text)), text
        finished += 1
    assert finished >= 5
