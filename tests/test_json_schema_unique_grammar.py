"""uniqueItems in the grammar form: arrays whose items have an infinite domain but one spelling per
value (strings, numbers, nested arrays, objects with additionalProperties false, ...) are exact: the
language agrees with jsonschema, masks agree with an enumeration of every valid instance on a tiny
vocabulary, and sampling through the Qwen2.5 vocabulary only ever yields valid instances."""

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
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.grammar_form import SchemaGrammar
from sgl_runtime.constrained.json_schema.language import compile_schema
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

TAG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"Key": {"type": "string", "maxLength": 3}, "Value": {"type": "string"}},
    "required": ["Key"],
}
STRINGS = ["a", "b", "", "ab", "a\nb", 'q"', "é"]
TAGS = [{"Key": "a"}, {"Key": "a", "Value": "x"}, {"Key": "b", "Value": "x"}, {"Key": "b"}, {"Key": "a", "Value": ""}]


def _arrays(pool, up_to=3):
    return [list(a) for n in range(up_to + 1) for a in itertools.product(pool, repeat=n)]


@pytest.mark.parametrize(
    "schema, pool",
    [
        ({"items": {"type": "string"}}, STRINGS),
        ({"items": {"type": "string", "maxLength": 2}, "minItems": 1, "maxItems": 3}, STRINGS),
        ({"items": {"type": "string", "pattern": "^[ab]*$"}}, STRINGS),
        ({"items": {"$ref": "#/$defs/tag"}, "$defs": {"tag": TAG}}, TAGS),
        ({"items": TAG, "minItems": 2}, TAGS),
        ({"items": {"type": ["string", "null", "boolean"]}}, ["a", None, True, False, "b"]),
        ({"items": {"type": "string", "maxLength": 40}}, STRINGS),  # long strings: counted terminals
        ({"items": {"type": "string", "pattern": '^[ab\\n"é]{0,35}$'}}, STRINGS),
        ({"items": {"type": "integer"}}, [0, 1, -1, 10]),
        ({"items": {"type": "number", "maximum": 2}}, [0, 1.5, 2, -0.25, 3]),
        (
            {"items": {"type": "array", "uniqueItems": True, "items": {"type": "integer"}}},
            [[], [1], [1, 2], [2, 1], [1, 1]],
        ),
        ({"items": {"type": "array", "items": {"type": "string"}}}, [[], ["a"], ["a", "a"], ["b", "a"]]),
        (
            {
                "items": {
                    **TAG,
                    "properties": {"Key": {"type": "string", "maxLength": 128}, "Value": {"type": "integer"}},
                }
            },
            TAGS[:1] + [{"Key": "a", "Value": 1}, {"Key": "b", "Value": 1}, {"Key": "a", "Value": 2}],
        ),
        ({"items": {"anyOf": [{"type": "string", "maxLength": 300}, {"type": "integer"}]}}, ["a", "1", 1, 2, ""]),
        ({"prefixItems": [{"type": "string"}, {"enum": ["a", "b"]}], "items": {"type": "string"}}, STRINGS),
        ({"prefixItems": [{"enum": ["a", 1]}], "items": {"type": "string"}, "maxItems": 3}, ["a", 1, "b", ""]),
    ],
)
def test_unique_items_language_agrees_with_jsonschema(schema, pool):
    schema = {"type": "array", "uniqueItems": True, **schema}
    built, validator = compile_schema(schema), Draft202012Validator(schema)
    assert isinstance(built, SchemaGrammar) and sorted(set(built.unique.values())) == ["close", "item", "open"]
    accepted = rejected = 0
    for array in _arrays(pool):
        text = json.dumps(array, separators=(",", ":"), ensure_ascii=False)
        valid = validator.is_valid(array)
        assert built.accepts(text) == valid, text
        accepted, rejected = accepted + valid, rejected + (not valid)
    assert accepted and rejected


def test_each_array_has_its_own_items():
    """Equal items in two different arrays (or inside the items of a plain array) are fine."""
    inner = {"type": "array", "uniqueItems": True, "items": {"type": "string"}}
    schema = {"type": "array", "items": {"type": "object", "properties": {"t": inner}, "additionalProperties": False}}
    built, validator = compile_schema(schema), Draft202012Validator(schema)
    for array in (
        [{"t": ["a", "b"]}, {"t": ["a", "b"]}],
        [{"t": ["a"]}, {"t": ["b", "a"]}, {}],
        [{"t": ["a", "a"]}],
        [{"t": ["a"]}, {"t": ["b", "b"]}],
    ):
        text = json.dumps(array, separators=(",", ":"))
        assert built.accepts(text) == validator.is_valid(array), text


# Tokens that split items, close one item and open the next, or repeat a whole item.
TOKENS = ["[", "]", '"', "a", "b", '"a"', '"b"', ",", '","', '",', ',"', '"]', "ab", 'a"', 'b"', '"a",', ',"a"', '"]]']


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^(a|b|ab)$"}},
        {"type": "array", "uniqueItems": True, "minItems": 2, "items": {"type": "string", "pattern": "^[ab]{1,2}$"}},
        {
            "type": "array",
            "uniqueItems": True,
            "items": {"type": "string", "pattern": "^(a|b|aa|ab|ba|bb)$", "maxLength": 40},  # counted
        },
    ],
)
def test_masks_allow_exactly_the_prefixes_of_valid_arrays(schema):
    """Every item domain here is finite, so every valid instance can be listed: a token is allowed
    iff some valid instance starts with the text so far plus the token."""
    validator = Draft202012Validator(schema)
    words = [w for w in ("a", "b", "aa", "ab", "ba", "bb") if Draft202012Validator(schema["items"]).is_valid(w)]
    valid = [
        json.dumps(list(a), separators=(",", ":"))
        for n in range(len(words) + 1)
        for a in itertools.permutations(words, n)
        if validator.is_valid(list(a))
    ]
    constraint = wrap_built(*build_dfa("json_schema", schema, {})[:1], make_vocab(TOKENS), "json_schema")
    assert masks_allow_exactly(constraint, TOKENS, set(valid), steps=6) > 500


# Items of several tokens (objects whose strings have long length bounds, so the grammar form):
# tokens that split items anywhere, close one and open the next, or repeat one.
LONG_TAG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "Key": {"type": "string", "pattern": "^[ab]$", "maxLength": 128},
        "Value": {"type": "string", "pattern": "^a?$", "maxLength": 300},
    },
    "required": ["Key", "Value"],
}
TAG_TOKENS = [
    "[",
    "]",
    ",",
    '{"Key":"',
    '","Value":"',
    '"}',
    "a",
    "b",
    '"},{',
    '"}]',
    '{"Key":"a","Value":"a"}',
    '"',
    "}",
]


@pytest.mark.parametrize("min_items", [0, 3])
def test_masks_of_items_spanning_several_tokens_allow_exactly_valid_prefixes(min_items):
    """Every mask equals the set of tokens after which some valid instance remains possible, for
    items of several tokens (the four valid tags are listed, so every valid array is)."""
    schema = {"type": "array", "uniqueItems": True, "minItems": min_items, "items": LONG_TAG}
    built = compile_schema(schema)
    assert isinstance(built, SchemaGrammar)
    words = [{"Key": k, "Value": v} for k in "ab" for v in ("a", "")]
    valid = {
        json.dumps(list(a), separators=(",", ":"))
        for n in range(min_items, 5)
        for a in itertools.permutations(words, n)
    }
    constraint = built.constraint(make_vocab(TAG_TOKENS))
    assert masks_allow_exactly(constraint, TAG_TOKENS, valid, steps=9, frontier_cap=400) > 1000


@pytest.fixture(scope="module")
def qwen():
    tok = load_qwen2_tokenizer()
    return tok, Vocabulary.from_tokenizer(tok)


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {
                "Tags": {
                    "type": "array",
                    "uniqueItems": True,
                    "minItems": 3,
                    "maxItems": 5,
                    "items": {
                        **TAG,
                        "properties": {"Key": {"type": "string", "maxLength": 2}, "Value": {"enum": ["a"]}},
                    },
                }
            },
            "required": ["Tags"],
            "additionalProperties": False,
        },
        {"type": "array", "uniqueItems": True, "minItems": 4, "maxItems": 6, "items": {"enum": None}},
        {
            "type": "array",
            "uniqueItems": True,
            "minItems": 4,
            "maxItems": 6,
            "items": {"type": "string", "pattern": "^[ab]*$", "minLength": 1, "maxLength": 40},  # counted
        },
        {"type": "array", "uniqueItems": True, "minItems": 3, "maxItems": 5, "items": LONG_TAG},  # several tokens
        {
            "type": "array",
            "uniqueItems": True,
            "minItems": 3,
            "maxItems": 4,
            "items": {
                "type": "array",
                "maxItems": 2,
                "items": {"type": "string", "pattern": "^[ab]$", "maxLength": 300},
            },
        },
    ],
)
def test_sampling_through_qwen_yields_valid_instances(qwen, schema):
    """Random walks through the masks (items from a tiny alphabet so repeats are likely) always end
    as valid instances, and every step's mask agrees with the scalar step on the riskiest tokens."""
    if schema.get("items", {}).get("enum", 0) is None:
        schema = {**schema, "items": {"type": "string", "pattern": "^[ab]{1,5}$"}}
    _sample_valid_instances(qwen, schema)


SMALL_FREE_OBJECT = {
    "type": "object",
    "maxProperties": 2,
    "propertyNames": {"enum": ["a", "b"]},
    "additionalProperties": {"type": "string", "pattern": "^[ab]{1,2}$", "maxLength": 128},
}


@pytest.mark.parametrize(
    "schema, options",
    [
        (
            {"type": "array", "uniqueItems": True, "minItems": 4, "maxItems": 6, "items": LONG_TAG},
            {"key_order": "any"},
        ),
        ({"type": "array", "uniqueItems": True, "minItems": 5, "maxItems": 7, "items": SMALL_FREE_OBJECT}, {}),
        (
            {
                "type": "array",
                "uniqueItems": True,
                "minItems": 3,
                "maxItems": 4,
                "items": {"type": "array", "maxItems": 2, "items": SMALL_FREE_OBJECT},
            },
            {},
        ),
    ],
)
def test_sampling_items_compared_as_values_yields_valid_instances(qwen, schema, options):
    """The same for items whose keys come in any order (a repeat may be spelled differently)."""
    _sample_valid_instances(qwen, schema, **options)


def _sample_valid_instances(qwen, schema, **options):
    tok, vocab = qwen
    constraint = compile_constraint("json_schema", schema, tok, **options)
    validator = Draft202012Validator(schema)
    favoured = [i for i, b in enumerate(vocab.token_bytes) if b and len(b) <= 4 and set(b) <= set(b'ab01",:{}[]KeyVlu')]
    rng = random.Random(0)
    for _ in range(12):
        matcher, ids = constraint.matcher(), []
        for _step in range(150):
            allowed = np.flatnonzero(mask_bits(matcher.bitmask(), vocab.size))
            assert allowed.size, tok.decode(ids)
            if vocab.eos_token_ids[0] in allowed:
                break
            allowed_set = set(allowed.tolist())
            pick = [i for i in favoured if i in allowed_set] or allowed.tolist()
            for probe in rng.sample(pick, min(8, len(pick))):  # mask and step agree
                assert constraint.step(matcher.state, probe) is not None
            token = rng.choice(pick)
            matcher.advance(token)
            ids.append(token)
        text = tok.decode(ids)
        assert matcher.is_accepting(), text
        assert not _repeats_a_key(json.loads(text, object_pairs_hook=_Members)), text  # objects track their keys
        assert validator.is_valid(json.loads(text)), text


class _Members(list):
    """An object's members as written (a key may repeat)."""


def _repeats_a_key(value) -> bool:
    if isinstance(value, _Members):
        return len({k for k, _ in value}) < len(value) or any(_repeats_a_key(v) for _, v in value)
    return isinstance(value, list) and any(_repeats_a_key(v) for v in value)


@pytest.mark.parametrize(
    "schema, options",
    [
        ({"items": {"type": "integer"}}, {"integral_floats": True}),  # 1 and 1.0
        ({"items": {"type": "string"}}, {"whitespace": r"[ \n]{0,2}"}),
    ],
)
def test_unique_items_beyond_compact_one_spelling_scalars_are_refused(schema, options):
    with pytest.raises(ConstraintError, match="uniqueItems"):
        compile_schema({"type": "array", "uniqueItems": True, **schema}, **options)
    assert compile_schema({"type": "array", "uniqueItems": True, **schema}, lenient=True, **options).accepts("[]")


def _spellings(value):
    """Compact spellings of `value` with its object keys in every order."""
    if isinstance(value, dict):
        for order in itertools.permutations(value):
            for parts in itertools.product(*[list(_spellings(value[k])) for k in order]):
                yield "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + p for k, p in zip(order, parts)) + "}"
    elif isinstance(value, list):
        for parts in itertools.product(*[list(_spellings(x)) for x in value]):
            yield "[" + ",".join(parts) + "]"
    else:
        yield json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize(
    "schema, options, pool",
    [
        (
            {"items": {"type": "object", "properties": {"k": {"type": "string"}}}},  # undeclared keys
            {},
            [{}, {"k": "a"}, {"k": "a", "x": 1}, {"x": 1, "k": "a"}, {"x": [1, {"y": None, "z": 2}]}],
        ),
        (
            {"items": {"type": "object", "additionalProperties": False, "patternProperties": {"^a": {}}}},
            {},
            [{}, {"a": 1}, {"a": 1, "ab": 2}, {"ab": 2}, {"a": {"b": 1, "c": 2}}],
        ),
        ({"items": {"type": "array", "items": {}}}, {}, [[], [1], [{"a": 1, "b": 2}], [1.5], ["x"], [[{}]]]),
        (
            {"items": {"anyOf": [TAG, {**TAG, "required": ["Value"]}]}},
            {},
            [{"Key": "a"}, {"Key": "a", "Value": "b"}, {"Value": "b"}, {"Key": "b", "Value": ""}],
        ),
        ({"items": TAG}, {"key_order": "any"}, [{"Key": "a"}, {"Key": "a", "Value": "b"}, {"Key": "b", "Value": "a"}]),
        ({"items": {}}, {}, [1, 1.5, "1", {"a": 1, "b": 2}, [1], True, None, {"a": {"b": [1, 2], "c": {}}}]),
    ],
)
def test_items_of_several_spellings_are_compared_as_values(schema, options, pool):
    """Items that may be objects with keys in other orders are compared as JSON values: with
    uniqueItems the language is that without it, less the texts whose value jsonschema rejects
    (the same object spelled with its keys in another order is a repeat)."""
    schema = {"type": "array", "uniqueItems": True, **schema}
    built, validator = compile_schema(schema, **options), Draft202012Validator(schema)
    plain = compile_schema({k: v for k, v in schema.items() if k != "uniqueItems"}, **options)
    assert isinstance(built, SchemaGrammar) and "open values" in built.unique.values()
    accepted = rejected = 0
    for array in _arrays(pool):
        for text in itertools.islice(_spellings(array), 6):
            expected = plain.accepts(text) and validator.is_valid(array)
            assert built.accepts(text) == expected, text
            accepted, rejected = accepted + expected, rejected + (plain.accepts(text) and not expected)
    assert accepted > 20 and rejected > 20


# The tags of LONG_TAG with their keys in either order (key_order "any"), and tokens that split them.
ANY_ORDER_TOKENS = [
    *TAG_TOKENS,
    '{"Value":"',
    '","Key":"',
    '{"Value":"a","Key":"a"}',
    "{",
    "Key",
    '":"',
    '"Value',
]


@pytest.mark.parametrize("min_items", [0, 3])
def test_masks_of_items_compared_as_values_allow_exactly_valid_prefixes(min_items):
    """As above with either key order: a tag spelled in the other order repeats it, so after three
    distinct tags a fourth may only be the one left, in either spelling."""
    schema = {"type": "array", "uniqueItems": True, "minItems": min_items, "items": LONG_TAG}
    built = compile_schema(schema, key_order="any")
    assert isinstance(built, SchemaGrammar) and "open values" in built.unique.values()
    words = [{"Key": k, "Value": v} for k in "ab" for v in ("a", "")]
    valid = {
        "[" + ",".join(parts) + "]"
        for n in range(min_items, 5)
        for a in itertools.permutations(words, n)
        for parts in itertools.product(*[list(_spellings(w)) for w in a])
    }
    constraint = built.constraint(make_vocab(ANY_ORDER_TOKENS))
    assert masks_allow_exactly(constraint, ANY_ORDER_TOKENS, valid, steps=10, frontier_cap=600) > 5000


def test_budget_completion_finishes_unique_arrays_without_repeating_an_item(qwen):
    """With few tokens left the matcher forces a short completion: inside an open unique array it is
    found (the item texts do not multiply the search's states) and never repeats an earlier item."""
    tok, vocab = qwen
    schema = {"type": "array", "uniqueItems": True, "maxItems": 3, "items": TAG}
    constraint = compile_constraint("json_schema", schema, tok)
    matcher = constraint.matcher()
    prefix = '[{"Key":"a","Value":""},{"Key":"a'
    for token in tok.encode(prefix, add_special_tokens=False):
        matcher.advance(token)
    matcher.budget, matcher.consumed = 30, 24  # 6 tokens left: the completion is forced now
    forced = matcher.forced_token_ids()
    assert forced and len(forced) <= 6
    for token in forced:
        matcher.advance(token)
    text = prefix + tok.decode(forced)
    assert matcher.is_accepting() and Draft202012Validator(schema).is_valid(json.loads(text)), text
    rng = random.Random(1)
    for _ in range(10):  # random walks under a 12-token budget end as valid arrays
        matcher, ids = constraint.matcher(), []
        matcher.budget = 12
        while len(ids) < 12 and not matcher.is_terminated():
            forced = matcher.forced_token_ids()
            if forced:
                step = forced[: 12 - len(ids)]
            else:
                allowed = [i for i in np.flatnonzero(mask_bits(matcher.bitmask(), vocab.size)) if i < vocab.size]
                allowed = [i for i in allowed if i not in vocab.eos_token_ids]
                if not allowed:
                    break
                step = [rng.choice(allowed)]
            for token in step:
                matcher.advance(token)
                ids.append(token)
        text = tok.decode(ids)
        assert matcher.is_accepting() and Draft202012Validator(schema).is_valid(json.loads(text)), text


def test_earlier_items_are_followed_in_every_key_order():
    """unique_values: equal JSON values are repeats whatever their key order (numbers by value, a key
    written twice is two members), and the continuations of a text are those of every spelling."""
    from sgl_runtime.constrained.grammar.unique_values import continuations, repeats

    seen = frozenset([b'{"a":1,"b":[2,{"x":"y","z":null}]}', b'"s"', b'{"a":1,"a":2}'])
    assert repeats(seen, b'{"b":[2,{"z":null,"x":"y"}],"a":1}') and repeats(seen, b'{"a":2,"a":1}')
    assert not repeats(seen, b'{"b":[2,{"z":null,"x":"y"}],"a":2}') and not repeats(seen, b'{"a":2}')
    assert continuations(seen, b'{"', 1) == {b"a", b"b"}
    assert continuations(seen, b'{"b":[2,{"z":null,', 40) == {b'"x":"y"}],"a":1}'}
    assert continuations(seen, b'{"a":', 2) == {b"1,", b"2,"}
    assert continuations(seen, b'"s"', 3) == {b""} and continuations(seen, b'"t', 3) == set()
    assert continuations(seen, b"{", 40, keep=lambda prefix: len(prefix) < 3) == {b'"a":', b'"b":'}  # whole key texts
