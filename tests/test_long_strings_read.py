"""Strings of any length are read exactly: a long string's count is folded out of the lexer
state (LexerContext.fold, GrammarState.shift), so reading or generating tens of thousands of
characters neither runs out of lexer states nor lets a wrong length through, against jsonschema
on both sides of minLength and maxLength."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from sgl_runtime.constrained.compiler import compile_constraint
from sgl_runtime.constrained.grammar.compiler import GrammarConstraint
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

PIECE = 'ab c\u00e9"\\\n\U0001f600'  # plain, two-byte, escaped and four-byte characters: 9 characters
SCHEMAS = [
    {"type": "string", "maxLength": 20000},
    {
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 15000, "maxLength": 20000}},
        "required": ["a"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "string", "pattern": "^[a-z ]*$", "maxLength": 30000}},
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_qwen2_tokenizer()


def _string(n: int, pattern: bool) -> str:
    text = ("lorem ipsum " if pattern else PIECE) * (n // 9 + 1)
    return text[:n]


def _instance(schema: dict, s: str):
    return s if schema["type"] == "string" else ({"a": s} if schema["type"] == "object" else ["x", s])


def _text(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _states(constraint: GrammarConstraint) -> int:
    return sum(ctx.n_states for ctx in constraint.engine._contexts.values())


@pytest.mark.parametrize("schema", SCHEMAS, ids=["string", "object", "array"])
def test_long_strings_are_accepted_exactly_where_jsonschema_accepts(tokenizer, schema):
    constraint = compile_constraint("json_schema", schema, tokenizer)
    assert isinstance(constraint, GrammarConstraint)
    validator = jsonschema.Draft202012Validator(schema)
    pattern = "pattern" in json.dumps(schema)
    verdicts = []
    for n in (14999, 15000, 19999, 20000, 20001, 29999, 30000, 30001, 45000):
        value = _instance(schema, _string(n, pattern))
        expected = validator.is_valid(value)
        assert constraint.accepts(_text(value)) == expected, (n, expected)
        verdicts.append(expected)
    assert True in verdicts and False in verdicts
    states = _states(constraint)
    assert states < 10000  # folded: not one lexer state per character read ...
    assert not constraint.accepts(_text(_instance(schema, _string(200000, pattern))))
    assert _states(constraint) == states  # ... however long the string


def test_a_long_string_is_walked_token_by_token_to_its_maximum(tokenizer):
    """Every token of a 20,000-character string (the maximum) is in its mask, there only tokens
    that close the string are allowed, and the text is accepted where it ends."""
    schema = SCHEMAS[1]
    constraint = compile_constraint("json_schema", schema, tokenizer)
    text = _text(_instance(schema, _string(20000, False)))
    assert text.endswith('"}')
    matcher = constraint.matcher()
    for token in tokenizer.encode(text[:-2], add_special_tokens=False):
        mask = matcher.bitmask()
        assert (int(mask[token // 32]) >> (token % 32)) & 1
        matcher.advance(token)
    assert _states(constraint) < 10000  # folded: not one lexer state per character read
    bits = np.unpackbits(matcher.bitmask().view(np.uint8), bitorder="little")[: constraint.vocabulary.size]
    allowed = np.flatnonzero(bits).tolist()
    assert allowed and all(constraint.vocabulary.token_bytes[t].startswith(b'"') for t in allowed)
    for token in tokenizer.encode('"}', add_special_tokens=False):
        matcher.advance(token)
    assert matcher.is_accepting()
