"""Constraints on the real Qwen2.5 tokenizer: random walks end in matching text, masks equal brute force."""

import random
import re

import numpy as np
import pytest

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

EOS = (151643, 151645)
WIDTH = 151936  # Qwen2.5's logit dimension, padded past the 151,665 tokenizer ids
PATTERNS = [
    r'\{"name": "[a-z]+", "age": [0-9]+\}',
    r"(yes|no|maybe)",
    r"-?(0|[1-9][0-9]{0,5})(\.[0-9]{1,3})?",
    r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}",
    r'"([^"\\]|\\["\\n])*"',
    r"(日本|中文)[0-9]{2}é?",
]


@pytest.fixture(scope="module")
def tok():
    return load_qwen2_tokenizer()


def allowed(mask: np.ndarray) -> np.ndarray:
    return np.nonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))[0]


def test_vocabulary_matches_decoding(tok):
    vocab = Vocabulary.from_tokenizer(tok, vocab_size=WIDTH, eos_token_ids=EOS)
    assert vocab.size == WIDTH and vocab.num_words == WIDTH // 32
    assert vocab.eos_token_ids == EOS
    assert all(vocab.token_bytes[i] is None for i in range(151643, WIDTH))
    rng = random.Random(0)
    for i in rng.sample(range(151643), 2000):
        text = tok.decode([i])
        if "\ufffd" not in text:
            assert vocab.token_bytes[i] == text.encode()
    assert vocab.token_bytes[220] == b" " and vocab.token_bytes[198] == b"\n"


def pick(rng, options, vocab, accepting):
    """A random allowed token, biased so walks finish: EOS when allowed, else punctuation."""
    if accepting and rng.random() < 0.3:
        return EOS[1]
    if rng.random() < 0.5:
        plain = [i for i in options.tolist() if vocab.token_bytes[i] and not vocab.token_bytes[i].isalnum()]
        if plain:
            return rng.choice(plain)
    return int(rng.choice(options))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_random_walks_match_regex(tok, pattern):
    c = compile_constraint("regex", pattern, tok, vocab_size=WIDTH, eos_token_ids=EOS)
    rng = random.Random(hash(pattern) & 0xFFFF)
    for _ in range(10):
        m, ids = c.matcher(), []
        for _step in range(200):
            options = allowed(m.bitmask())
            assert options.size and options.max() < 151665
            t = pick(rng, options, c.vocabulary, m.is_accepting())
            if _step > 100:  # finish: take a token that lands in an accepting state when one exists
                ids_, nxt = c.index.allowed(m.state)
                finishing = ids_[c.dfa.accepting[nxt]]
                t = int(rng.choice(finishing)) if finishing.size else t
            if t in EOS:
                assert m.is_accepting()
                m.advance(t)
                break
            m.advance(t)
            ids.append(t)
        assert m.is_terminated()
        text = tok.decode(ids)
        assert re.fullmatch(pattern, text), (pattern, text)
        assert c.accepts(text)


@pytest.mark.parametrize("pattern", PATTERNS[:3] + PATTERNS[4:])
def test_masks_equal_brute_force(tok, pattern):
    c = compile_constraint("regex", pattern, tok, vocab_size=WIDTH, eos_token_ids=EOS)
    vocab, dfa = c.vocabulary, c.dfa
    states = random.Random(1).sample(range(dfa.n_states), min(4, dfa.n_states)) + [dfa.initial]
    for state in states:
        expected = {i for i, b in enumerate(vocab.token_bytes) if b and dfa.walk(state, b) >= 0}
        if dfa.accepting[state] or not expected:
            expected |= set(EOS)
        assert set(allowed(c.index.bitmask(state)).tolist()) == expected
        ids, nxt = c.index.allowed(state)
        for i, s in list(zip(ids.tolist(), nxt.tolist()))[:200]:
            assert dfa.walk(state, vocab.token_bytes[i]) == s


def test_path_tokenizer_and_choices(tok):
    from sgl_runtime.model_loader.demo_tokenizer import get_qwen2_tokenizer_dir

    c = compile_constraint("choices", ["Paris", "London", "東京"], get_qwen2_tokenizer_dir())
    assert c.accepts("東京") and not c.accepts("Pari")
    first = {bytes(c.vocabulary.token_bytes[i]) for i in allowed(c.matcher().bitmask())}
    assert b"Paris" in first and b"London" in first and b"P" in first
