"""Jump-forward: forced strings, canonical forced tokens, boundary healing, no UTF-8 split."""

import numpy as np
import pytest

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.constraint import DFAConstraint
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

EOS = (151643, 151645)
PERSON = r'\{"name": "[a-z]+", "age": [0-9]+\}'


@pytest.fixture(scope="module")
def tok():
    return load_qwen2_tokenizer()


def test_forced_tokens_are_canonical_and_legal(tok):
    c = compile_constraint("regex", PERSON, tok, vocab_size=151936, eos_token_ids=EOS)
    m = c.matcher()
    assert m.forced_string() == '{"name": "'
    forced = m.forced_token_ids()
    assert forced == tok.encode('{"name": "', add_special_tokens=False)
    for t in forced:
        m.advance(t)
    assert m.forced_token_ids() == [] and m.forced_string() == ""  # [a-z]+ branches
    for t in tok.encode("bob", add_special_tokens=False):
        m.advance(t)
    m.advance(tok.encode('"', add_special_tokens=False)[0])
    assert m.forced_string() == ', "age": '
    forced = m.forced_token_ids()
    text = tok.decode(forced)
    assert ', "age": '.startswith(text) and text  # a prefix: trailing tokens may be held back
    assert forced == tok.encode(text, add_special_tokens=False)
    for t in forced:
        m.advance(t)
    assert not m.is_accepting()


def test_full_generation_with_jump_forward_is_canonical(tok):
    c = compile_constraint("regex", PERSON, tok, vocab_size=151936, eos_token_ids=EOS)
    m, ids, passes = c.matcher(), [], 0
    script = iter(
        tok.encode("alice", add_special_tokens=False)
        + tok.encode('"', add_special_tokens=False)
        + tok.encode("42", add_special_tokens=False)
        + [tok.encode("}", add_special_tokens=False)[0]]
    )
    while not m.is_terminated():
        forced = m.forced_token_ids()
        for t in forced:
            m.advance(t)
        ids += forced
        if m.is_terminated():
            break
        t = next(script)
        allowed = np.unpackbits(m.bitmask().view(np.uint8), bitorder="little")
        assert allowed[t]
        m.advance(t)
        ids.append(t)
        passes += 1
    text = tok.decode(ids)
    assert text == '{"name": "alice", "age": 42}' and c.accepts(text)
    assert passes < len(ids)  # the forced tokens needed no forward pass of their own


def test_healing_holds_back_a_spanning_token():
    # vocabulary: "a", "b", "ab", "c"; forced "a" followed by b or c: "ab" spans the boundary
    vocab = Vocabulary([b"a", b"b", b"ab", b"c"], eos_token_ids=[])
    c = DFAConstraint(ByteDFA.from_regex("a(b|c)"), vocab)
    assert c.matcher().forced_string() == "a"
    assert c.matcher().forced_token_ids() == []  # "a" is held back: "ab" could span
    c2 = DFAConstraint(ByteDFA.from_regex("ac(b|c)"), vocab)
    assert c2.matcher().forced_string() == "ac"
    assert c2.matcher().forced_token_ids() == [0, 3]  # no token spans past "ac"


def test_forced_string_never_splits_a_character():
    vocab = Vocabulary([bytes([b]) for b in range(256)] + ["é".encode(), "è".encode()], eos_token_ids=[])
    c = DFAConstraint(ByteDFA.from_regex("x(é|è)"), vocab)  # é = C3 A9, è = C3 A8: C3 is forced
    m = c.matcher()
    assert m.forced_string() == "x" and m.forced_token_ids() == [ord("x")]
    m.advance(ord("x"))
    assert m.forced_string() == "" and m.forced_token_ids() == []
    m.advance(0xC3)  # now inside the character: the tail is forced but starts mid-character
    assert m.forced_token_ids() == []
    c2 = DFAConstraint(ByteDFA.from_regex("日本(a|b)"), vocab)
    forced = c2.matcher().forced_token_ids()
    assert bytes(b"".join(vocab.token_bytes[i] for i in forced)) == "日本".encode()


def test_no_jump_forward_from_accepting_or_branching_states(tok):
    c = compile_constraint("regex", "(abc)?", tok)
    assert c.matcher().forced_token_ids() == []
    c = compile_constraint("choices", ["north", "south"], tok)
    assert c.matcher().forced_token_ids() == []
