"""maxItems beyond the grammar form's 512 positions: the rules allow any number of items and the
engine counts them (grammar/frames.py), so an array takes exactly up to maxItems items; masks leave
out every token holding the separator after the last one, and the count goes with uniqueItems,
prefixItems and nesting."""

from __future__ import annotations

import json

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from tiny_vocab import mask_bits

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.frames import Opener
from sgl_runtime.constrained.json_schema.grammar_form import SchemaGrammar
from sgl_runtime.constrained.json_schema.language import compile_schema
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

LONG = {"type": "string", "pattern": "^[a-c]*$", "maxLength": 1000}  # a counted token: the grammar form


def _array(n: int, offset: int = 0) -> list:
    return ["abc"[(i + offset) % 3] for i in range(n)]


def _text(value) -> str:
    return json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize(
    "schema, sizes",
    [
        ({"items": LONG, "maxItems": 600}, [0, 1, 2, 599, 600, 601, 700]),
        ({"items": LONG, "minItems": 3, "maxItems": 513}, [0, 2, 3, 4, 512, 513, 514]),
        ({"prefixItems": [{"const": "c"}, {"const": "a"}], "items": LONG, "maxItems": 520}, [1, 2, 3, 519, 520, 521]),
        # from 17 items on, compact JSON counts them too, also arrays of small items that one automaton could hold
        ({"prefixItems": [True], "items": {"enum": ["a", "b", "c"]}, "maxItems": 17}, [0, 1, 16, 17, 18]),
        ({"items": LONG, "minItems": 5, "maxItems": 40}, [4, 5, 6, 39, 40, 41]),
    ],
)
def test_item_counts_beyond_the_rules_agree_with_jsonschema(schema, sizes):
    schema = {"type": "array", **schema}
    built, validator = compile_schema(schema), Draft202012Validator(schema)
    assert isinstance(built, SchemaGrammar)
    assert any(isinstance(kind, Opener) and kind.high == schema["maxItems"] for kind in built.unique.values())
    outcomes = set()
    for n in sizes:
        for shift in (0, 1):
            value = _array(n, 2 + 2 * shift)
            assert built.accepts(_text(value)) == validator.is_valid(value), (n, shift)
            outcomes.add(validator.is_valid(value))
    assert outcomes == {True, False}


def test_arrays_of_a_few_items_are_still_spelled_out_and_whitespace_keeps_positions():
    """Up to 16 items the rules spell the positions; with blanks between tokens the separator may not
    close at its `,`, so the rules spell up to 512 there."""
    small = compile_schema({"type": "object", "properties": {"a": {"type": "array", "maxItems": 16}}})
    assert not any(isinstance(kind, Opener) for kind in small.unique.values())
    spaced = compile_schema({"type": "array", "items": LONG, "maxItems": 40}, whitespace=1)
    assert not any(isinstance(kind, Opener) for kind in spaced.unique.values())
    assert spaced.accepts(json.dumps(_array(40))) and not spaced.accepts(json.dumps(_array(41)))


def test_unique_items_and_nested_bounded_arrays():
    inner = {"type": "array", "maxItems": 515, "items": LONG}
    schema = {"type": "array", "uniqueItems": True, "maxItems": 514, "items": inner}
    built, validator = compile_schema(schema), Draft202012Validator(schema)
    kinds = [kind for kind in built.unique.values() if isinstance(kind, Opener)]
    assert sorted((k.unique or "", k.high) for k in kinds) == [("", 515), ("text", 514)]
    for value in (
        [[_word(i)] for i in range(514)],
        [[_word(i)] for i in range(515)],  # one item too many
        [[_word(1)], [_word(2)], [_word(1)]],  # a repeat
        [[_word(i) for i in range(515)], [_word(0)]],
        [[_word(i) for i in range(516)]],  # an inner array too long
        [[], [_word(0)] * 515, ["a", "b"]],
    ):
        assert built.accepts(_text(value)) == validator.is_valid(value), value[:3]


def _word(i: int) -> str:
    """A distinct word over a-c for each i."""
    out, i = "", i + 1
    while i:
        out, i = "abc"[i % 3] + out, i // 3
    return out


def test_blanks_between_tokens_keep_the_positions_bound():
    with pytest.raises(ConstraintError, match="more than 512 positions"):
        compile_schema({"type": "array", "items": LONG, "maxItems": 600}, whitespace=2)


@pytest.fixture(scope="module")
def qwen():
    tok = load_qwen2_tokenizer()
    return tok, Vocabulary.from_tokenizer(tok)


def test_masks_leave_out_the_separator_after_the_last_item(qwen):
    """After 599 of 600 items a token that holds `,` and ends the item is allowed, after 600 none;
    `]` stays allowed; mask and scalar step agree on every token that holds a `,` or `]`."""
    tok, vocab = qwen
    schema = {"type": "array", "maxItems": 600, "items": {"type": "object", "properties": {"k": LONG}}}
    constraint = compile_constraint("json_schema", schema, tok)
    delimited = [i for i, b in enumerate(vocab.token_bytes) if b and (b"," in b or b"]" in b)]
    for n, comma_allowed in ((598, True), (599, False)):
        text = _text([{"k": "ab"}] * n + [{"k": "a"}])[:-3]  # the last item open: `...,{"k":"a`
        matcher = constraint.matcher()
        for token in tok.encode(text, add_special_tokens=False):
            matcher.advance(token)
        allowed = _allowed(matcher, vocab)  # inside the last item's string
        for probe in ('"},', '"}'):
            ids = vocab.ids_for_bytes(probe.encode())
            assert ids and all((i in allowed) == (comma_allowed or "," not in probe) for i in ids), (n, probe)
        _agree_with_step(constraint, matcher, allowed, delimited)
        matcher.advance(vocab.ids_for_bytes(b'"}')[0])
        allowed = _allowed(matcher, vocab)  # after the item
        for probe, expected in ((",", comma_allowed), (",{", comma_allowed), ("]", True)):
            ids = vocab.ids_for_bytes(probe.encode())
            assert ids and all((i in allowed) == expected for i in ids), (n, probe)
        _agree_with_step(constraint, matcher, allowed, delimited)


def _allowed(matcher, vocab) -> set:
    return set(np.flatnonzero(mask_bits(matcher.bitmask(), vocab.size)).tolist())


def _agree_with_step(constraint, matcher, allowed: set, ids: list) -> None:
    for i in ids:
        assert (i in allowed) == (constraint.step(matcher.state, i) is not None), i
