"""The grammar form tries each closed subschema as one flat automaton (a leaf) before building
rules for it. A closed subschema's language does not depend on where it sits, so the flat
compiler builds it once however many enclosing leaf attempts reach it, and one that runs out of
work budget on its own is not built again by the attempts that follow. The language is unchanged:
it agrees with jsonschema whatever the budget."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

import pytest
from jsonschema import Draft202012Validator

from sgl_runtime.constrained.json_schema import compiler
from sgl_runtime.constrained.json_schema.language import schema_to_grammar

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
ITEM = {
    "type": "object",
    "properties": {w: {"enum": WORDS} for w in WORDS[:4]},
    "additionalProperties": False,
}
SCHEMA = {
    "type": "object",
    "$defs": {"item": ITEM},
    "properties": {
        "a": {"$ref": "#/$defs/item"},
        "b": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 3},
        "c": {
            "type": "object",
            "properties": {"d": {"$ref": "#/$defs/item"}, "e": {"$ref": "#/$defs/item"}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


def _item_compiles(monkeypatch, budget: int):
    """How often the flat compiler built ITEM while building SCHEMA's grammar form, and the grammar."""
    counts: Counter = Counter()
    original = compiler._Compiler._compile

    def counting(self, schema, level, mode):
        counts[id(schema)] += 1
        return original(self, schema, level, mode)

    monkeypatch.setattr(compiler._Compiler, "_compile", counting)
    grammar = schema_to_grammar(SCHEMA, max_work_states=budget)
    return counts[id(ITEM)], grammar


# 150000: everything is one leaf; 2000: the root is rules, ITEM a leaf built inside the failed
# attempts; 200: ITEM itself is too large (rules down to its values)
@pytest.mark.parametrize("budget", [150_000, 2_000, 200])
def test_a_closed_subschema_is_built_flat_once(monkeypatch, budget):
    built, grammar = _item_compiles(monkeypatch, budget)
    assert built == 1
    leaves = len(grammar.terminals)
    assert (leaves == 1) == (budget == 150_000)


def _instances(rng: random.Random, n: int):
    def item():
        keys = WORDS[:4] + ["other"]
        return {k: rng.choice(WORDS + [1]) for k in keys if rng.random() < 0.4}

    values = {
        "a": lambda: item(),
        "b": lambda: [item() for _ in range(rng.randrange(5))],
        "c": lambda: {k: item() for k in ("d", "e", "f") if rng.random() < 0.5},
    }
    for _ in range(n):
        yield {k: make() for k, make in values.items() if rng.random() < 0.6}


@pytest.mark.parametrize("budget", [150_000, 2_000, 200])
def test_the_language_is_the_same_whatever_the_budget(budget):
    grammar = schema_to_grammar(SCHEMA, max_work_states=budget)
    validator = Draft202012Validator(SCHEMA)
    rng = random.Random(budget)
    verdicts = Counter()
    for value in itertools.islice(_instances(rng, 400), 400):
        expected = validator.is_valid(value)
        assert grammar.accepts(json.dumps(value, separators=(",", ":"))) == expected, value
        verdicts[expected] += 1
    assert verdicts[True] > 20 and verdicts[False] > 20
