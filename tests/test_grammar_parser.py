"""The value-free LALR driver (grammar/parser.py): `accepted(stack)`, which simulates reductions
without copying the stack, names exactly the terminals that `feed` (lark's own step, reductions
and shift) accepts, on stacks reached by random walks over the shipped grammars and a JSON
Schema grammar (default reductions on)."""

from __future__ import annotations

import random

import pytest

from sgl_runtime.constrained.grammar.parser import END, LalrStacks
from sgl_runtime.constrained.grammar.source import build_lark, build_parser
from sgl_runtime.constrained.json_schema.language import schema_to_grammar

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "integer"}}}},
        "c": {},
        "d": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "number"}}]},
    },
}


def _parsers():
    for name in ("json", "sql", "arithmetic"):
        yield name, build_parser(name, None, "start"), False
    yield "schema", build_lark(schema_to_grammar(SCHEMA).text, placeholders=True), True


@pytest.mark.parametrize(
    "name,lark,default_reductions", list(_parsers()), ids=lambda x: x if isinstance(x, str) else ""
)
def test_accepted_is_what_feed_accepts(name, lark, default_reductions):
    stacks = LalrStacks(lark, default_reductions=default_reductions)
    rng = random.Random(0)
    checked = 0
    for _ in range(100):
        stack = stacks.initial
        for _ in range(40):
            terminals = [t for t in stacks.states[stack[-1]] if t.isupper() or t == END]
            fed = {t: stacks.feed(stack, t) for t in terminals}
            assert stacks.accepted(stack) == frozenset(t for t, after in fed.items() if after is not None), stack
            checked += len(terminals)
            onward = [t for t, after in fed.items() if after is not None and t != END]
            if not onward:
                break
            stack = fed[rng.choice(onward)]
    assert checked > 1000
