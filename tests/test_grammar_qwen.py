"""Grammar constraints on the real Qwen2.5 vocabulary: vectorised masks vs per-token steps,
vs a lark-only oracle, canonical tokenizations of sentences, random walks that lark parses."""

from __future__ import annotations

import json
import random

import lark
import numpy as np
import pytest
from grammar_oracle import lark_parses, lark_viable

from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.sampling import closer_ids, pick_walk_token
from sgl_runtime.constrained.grammar.source import GRAMMAR_DIR
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

STATES = {
    "json": ["", '{"a', "[1.", '{"a": [1, 2], "b": {"c": nu', "[1 "],
    "arithmetic": ["", "1", "1.", "foo(1, x", "-(2 *"],
    "sql": ["", "SELECT a", "select a fr", "SELECT a FROM t WHERE x = 'ab", "SELECT a FROM t t2 LEFT JOIN u ON"],
}
SENTENCES = {
    "json": [
        '{"name": "Ada", "tags": ["x", "y\\n"], "n": -1.5e3, "ok": true, "z": null}',
        '[\n  {"a": 0},\n  []\n]',
        '"caf\u00e9 \u2603"',
    ],
    "arithmetic": ["3.25 * (x + y) - f(2, -z) / 7", "sqrt(a*a + b*b)"],
    "sql": [
        "SELECT name, COUNT(*) AS n FROM users u LEFT JOIN orders o ON u.id = o.user_id "
        "WHERE u.age >= 18 AND NOT u.name = 'bob' GROUP BY name ORDER BY n DESC LIMIT 10;"
    ],
}


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.from_tokenizer(load_qwen2_tokenizer())


@pytest.fixture(scope="module")
def grammars(vocab):
    return {name: compile_grammar(name, vocab) for name in STATES}


@pytest.fixture(scope="module")
def parsers():
    return {name: lark.Lark((GRAMMAR_DIR / f"{name}.lark").read_text(), parser="lalr") for name in STATES}


def allowed_flags(mask: np.ndarray, size: int) -> np.ndarray:
    return np.unpackbits(mask.view(np.uint8), bitorder="little")[:size].astype(bool)


def matcher_at(constraint, prefix: str):
    m = constraint.matcher()
    m.state = constraint.engine.feed(constraint.engine.initial, prefix.encode())
    assert m.state is not None and constraint.engine.viable(m.state), prefix
    return m


@pytest.mark.parametrize("name", list(STATES))
def test_vectorised_masks_equal_per_token_steps_for_every_token(vocab, grammars, name):
    c = grammars[name]
    for prefix in STATES[name][:3]:
        m = matcher_at(c, prefix)
        got = allowed_flags(m.bitmask(), vocab.size)
        ref = np.array([c.step(m.state, i) is not None for i in range(vocab.size)])
        ref[list(vocab.eos_token_ids)] = m.is_accepting()
        diff = np.flatnonzero(got != ref)
        assert diff.size == 0, (prefix, [(vocab.token_bytes[i], got[i]) for i in diff[:5]])


def _oracle_sample(vocab, flags, rng):
    def usable(i):
        b = vocab.token_bytes[i]
        if not b or " " * 32 in b.decode("utf-8", "replace"):
            return False  # the constraint bounds blanks at 32 bytes; lark does not
        try:
            b.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False  # a partial UTF-8 character is not a str for lark

    ids = [i for i in rng.sample(range(vocab.size), 4000) if usable(i)]
    allowed = [i for i in np.flatnonzero(flags)[:20000].tolist() if usable(i)]
    return rng.sample(allowed, min(120, len(allowed))) + [i for i in ids if not flags[i]][:150]


@pytest.mark.parametrize("name", list(STATES))
def test_masks_agree_with_lark_oracle_on_sampled_tokens(vocab, grammars, parsers, name):
    rng = random.Random(7)
    for prefix in STATES[name]:
        flags = allowed_flags(matcher_at(grammars[name], prefix).bitmask(), vocab.size)
        for i in _oracle_sample(vocab, flags, rng):
            text = prefix + vocab.token_bytes[i].decode("utf-8")
            assert flags[i] == lark_viable(parsers[name], text), (prefix, vocab.token_bytes[i])


@pytest.mark.parametrize("name", list(STATES))
def test_canonical_tokenizations_of_sentences_are_allowed(vocab, grammars, name):
    c = grammars[name]
    for sentence in SENTENCES[name]:
        m = c.matcher()
        for tid in vocab.encode(sentence):
            assert allowed_flags(m.bitmask(), vocab.size)[tid], (sentence, vocab.token_bytes[tid])
            m.advance(tid)
        assert m.is_accepting() and allowed_flags(m.bitmask(), vocab.size)[vocab.eos_token_ids[0]]


def _walk(c, vocab, rng: random.Random, closers: list[int], random_steps: int, jump_forward: bool = False) -> str:
    m, out, eos = c.matcher(), [], vocab.eos_token_ids[0]
    lens = c.table.lens
    for step in range(random_steps + 150):
        if jump_forward:
            forced = m.forced_token_ids()
            for tid in forced:  # as the scheduler appends them: no mask, straight advance
                m.advance(tid)
            out.extend(forced)
        ids = np.flatnonzero(allowed_flags(m.bitmask(), vocab.size))
        assert ids.size, "a reachable state allows nothing"
        pick = pick_walk_token(ids, step, random_steps, lens, eos, closers, rng)
        m.advance(int(pick))
        if pick in vocab.eos_token_ids:
            assert m.is_terminated()
            return b"".join(vocab.token_bytes[t] for t in out).decode("utf-8")
        out.append(int(pick))
    raise AssertionError(f"walk did not finish: {b''.join(vocab.token_bytes[t] for t in out)!r}")


@pytest.mark.parametrize("name", list(STATES))
def test_random_walks_produce_text_lark_parses(vocab, grammars, parsers, name):
    c, rng = grammars[name], random.Random(1234)
    closers = closer_ids(name, vocab)
    for walk in range(50):
        text = _walk(c, vocab, rng, closers, random_steps=4 + walk % 12, jump_forward=walk % 2 == 1)
        assert lark_parses(parsers[name], text), text
        assert c.accepts(text)


def test_json_forced_tokens_with_a_fixed_prefix(vocab, grammars):
    c = grammars["json"]
    m = matcher_at(c, '{"answer": tr')
    assert m.forced_string() == "ue"
    ids = m.forced_token_ids()
    assert ids and b"".join(vocab.token_bytes[i] for i in ids) == b"ue"
    for i in ids:
        m.advance(i)
    assert m.forced_token_ids() == []  # '}' ',' or blanks may follow
    m = matcher_at(c, '{"answer"')
    assert m.forced_string() == ":"
    for i in m.forced_token_ids():  # held back: a token like ':"' may span the boundary
        m.advance(i)
    assert matcher_at(c, '{"answer": 1').forced_string() == ""


def test_json_dumps_round_trip(vocab, grammars):
    c, rng = grammars["json"], random.Random(3)
    for _ in range(30):
        value = _random_json(rng, 3)
        text = json.dumps(value, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        assert c.accepts(text), text
        m = c.matcher()
        for tid in vocab.encode(text):
            m.advance(tid)
        assert m.is_accepting()


def _random_json(rng: random.Random, depth: int):
    kinds = ["int", "float", "str", "bool", "null"] + (["list", "dict"] if depth else [])
    kind = rng.choice(kinds)
    if kind == "list":
        return [_random_json(rng, depth - 1) for _ in range(rng.randrange(4))]
    if kind == "dict":
        return {
            rng.choice(["a", "b\u00e9", 'k"q', ""]) + str(i): _random_json(rng, depth - 1)
            for i in range(rng.randrange(4))
        }
    return {
        "int": lambda: rng.randrange(-(10**6), 10**6),
        "float": lambda: rng.uniform(-1e9, 1e9),
        "str": lambda: "".join(rng.choice('ab \\"\n\u00e9\u2603') for _ in range(rng.randrange(6))),
        "bool": lambda: rng.random() < 0.5,
        "null": lambda: None,
    }[kind]()
