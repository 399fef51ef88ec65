"""Budget-aware completion: with a token budget, a constrained walk always ends on a sentence.

Random walks pick uniformly among the allowed tokens (an adversarial model: EOS is rarely
picked while anything else is allowed) under seeded random budgets; every walk must end
accepting within its budget. Masks with a large budget equal the masks without one.
"""

import json
import random

import jsonschema
import lark
import numpy as np
import pytest

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.budget import byte_distances
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.constraint import DFAConstraint
from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.source import grammar_text
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

REGEXES = [r"[a-z]+@[a-z]+\.com", r'\{"x": \[[0-9]+(, [0-9]+)*\]\}', r"(ab|cd)*e{2,}"]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "n": {"type": "integer"},
    },
    "required": ["name", "tags", "n"],
    "additionalProperties": False,
}


def allowed_ids(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.nonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))[0]]


def walk(constraint, budget, rng: random.Random) -> tuple[list[int], bool]:
    """(tokens chosen, ended by EOS) for one uniform random walk under `budget`."""
    m = constraint.matcher()
    m.set_token_budget(budget)
    eos, out = set(constraint.vocabulary.eos_token_ids), []
    while budget is None or len(out) < budget:
        ids = np.nonzero(np.unpackbits(m.bitmask().view(np.uint8), bitorder="little"))[0]
        choice = int(ids[rng.randrange(len(ids))])
        if choice in eos:
            return out, True
        m.advance(choice)
        out.append(choice)
    assert m.is_accepting() == constraint.accepts(decode(constraint, out))
    return out, False


def decode(constraint, ids: list[int]) -> str:
    return b"".join(constraint.vocabulary.token_bytes[i] for i in ids).decode("utf-8")


@pytest.fixture(scope="module")
def qwen():
    return load_qwen2_tokenizer()


# ---- tiny hand-made vocabulary: exact distances and masks --------------------------------------

TINY = [b"a", b"b", b"ab", b"abc", None, b"c"]  # 4 = EOS


def tiny(pattern: str) -> DFAConstraint:
    return DFAConstraint(ByteDFA.from_regex(pattern), Vocabulary(TINY, eos_token_ids=[4]))


def test_byte_distances_are_exact():
    c = tiny("ab*c")
    dist = byte_distances(c.dfa)
    m = c.matcher()
    assert dist[m.state] == 2 and c.budget.tokens_to_accept(m.state) == 2  # along "a" "c"
    m.advance(0)
    assert dist[m.state] == 1
    m.advance(5)
    assert dist[m.state] == 0


def test_exact_budget_masks_on_tiny_vocabulary():
    c = tiny("ab*c")
    m = c.matcher()
    m.set_token_budget(2)
    assert allowed_ids(m.bitmask()) == [0, 2, 3]  # "a"+"c", "ab"+"c" and "abc" all fit
    m.advance(0)
    assert allowed_ids(m.bitmask()) == [5]  # one token left: "b" would leave "c" unwritten
    unlimited = c.matcher()
    unlimited.advance(0)
    assert allowed_ids(unlimited.bitmask()) == [1, 5]
    twin = m.copy()
    twin.advance(5)
    assert twin.is_terminated() and m.remaining_tokens() == 1 and twin.remaining_tokens() == 0


def test_token_bound_uses_multi_byte_tokens():
    c = tiny("abcc")
    m = c.matcher()
    assert c.budget.dist[m.state] == 4 and c.budget.tokens_to_accept(m.state) == 2  # "abc" "c"
    m.set_token_budget(2)
    assert allowed_ids(m.bitmask()) == [3]  # "a" or "ab" first would need 3 tokens


def test_zero_budget_allows_only_eos_where_accepting():
    c = tiny("a(bc)*")
    m = c.matcher()
    m.set_token_budget(1)
    assert allowed_ids(m.bitmask()) == [0, 3]  # "a" and "abc" are sentences; "ab" is not
    m.advance(0)
    assert allowed_ids(m.bitmask()) == [4]


@pytest.mark.parametrize("pattern", ["(ab|c)+", "a(b|c)*abc"])
def test_tiny_random_walks_end_accepting(pattern):
    vocab = Vocabulary(TINY, eos_token_ids=[4])
    c = DFAConstraint(ByteDFA.from_regex(pattern), vocab)
    rng = random.Random(1)
    for _ in range(100):
        budget = rng.randint(c.budget.tokens_to_accept(c.dfa.initial), 12)
        out, _ = walk(c, budget, rng)
        assert len(out) <= budget and c.accepts(decode(c, out))


# ---- Qwen2.5 tokenizer --------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_walks_end_accepting_within_budget(qwen, pattern):
    import re

    c = compile_constraint("regex", pattern, qwen)
    rng = random.Random(hash(pattern) % 1000)
    for _ in range(30):
        budget = rng.randint(c.budget.tokens_to_accept(c.dfa.initial), 40)
        out, _ = walk(c, budget, rng)
        assert len(out) <= budget and re.fullmatch(pattern, decode(c, out), re.ASCII), decode(c, out)


def test_schema_walks_end_valid_within_budget(qwen):
    c = compile_constraint("json_schema", json.dumps(SCHEMA), qwen)
    rng = random.Random(7)
    for _ in range(30):
        budget = rng.randint(c.budget.tokens_to_accept(c.dfa.initial), 60)
        out, _ = walk(c, budget, rng)
        assert len(out) <= budget
        jsonschema.validate(json.loads(decode(c, out)), SCHEMA)


@pytest.mark.parametrize("name", ["json", "arithmetic"])
def test_grammar_walks_end_in_a_sentence_within_budget(qwen, name):
    c = compile_constraint("grammar", name, qwen)
    parser = lark.Lark(grammar_text(name), parser="lalr")
    rng = random.Random(3)
    for _ in range(25):
        budget = rng.randint(8, 60)
        out, _ = walk(c, budget, rng)
        assert len(out) <= budget
        parser.parse(decode(c, out))  # raises if the text is not a sentence


def test_grammar_walks_with_a_tight_budget(qwen):
    c = compile_constraint("grammar", "arithmetic", qwen)
    m = c.matcher()
    m.advance(qwen.encode("x", add_special_tokens=False)[0])
    assert c.completion.tokens(m.state) == []  # already a sentence: nothing to add
    parser = lark.Lark(grammar_text("arithmetic"), parser="lalr")
    rng = random.Random(4)
    for _ in range(40):
        out, _ = walk(c, 16, rng)
        parser.parse(decode(c, out))


def test_grammar_walks_on_tiny_vocabulary():
    tokens = ["{", "}", "[", "]", '"', "a", '"a"', ":", ",", "1", "12", "[[", '{"a":[', " ", "true"]
    c = compile_grammar("json", Vocabulary([t.encode() for t in tokens] + [None], [len(tokens)]))
    parser = lark.Lark(grammar_text("json"), parser="lalr")
    rng = random.Random(5)
    for _ in range(60):
        budget = rng.randint(6, 30)
        out, _ = walk(c, budget, rng)
        assert len(out) <= budget
        parser.parse(decode(c, out))


@pytest.mark.parametrize(
    "kind, spec", [("regex", REGEXES[1]), ("json_schema", json.dumps(SCHEMA)), ("grammar", "json")]
)
def test_masks_unchanged_with_a_large_budget(qwen, kind, spec):
    c = compile_constraint(kind, spec, qwen)
    rng = random.Random(11)
    for _ in range(3):
        plain, budgeted = c.matcher(), c.matcher()
        budgeted.set_token_budget(10_000)
        for _ in range(25):
            mask = plain.bitmask()
            assert np.array_equal(mask, budgeted.bitmask())
            ids = [i for i in allowed_ids(mask) if i not in c.vocabulary.eos_token_ids]
            if not ids:
                break
            token = rng.choice(ids)
            plain.advance(token)
            budgeted.advance(token)
