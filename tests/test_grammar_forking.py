"""Grammars that are not LALR(1), run with their conflicts kept (grammar/forking.py): a text that
parses several ways is followed each way. The language is checked against lark's Earley parser
(which takes any context-free grammar) on every string up to a length, and the masks on the Qwen2.5
vocabulary against the scalar step, token by token."""

from __future__ import annotations

import itertools
import random

import lark
import numpy as np
import pytest

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.compiler import GrammarConstraint
from sgl_runtime.constrained.grammar.engine import Forks, GrammarEngine
from sgl_runtime.constrained.grammar.parser import LalrStacks
from sgl_runtime.constrained.grammar.source import build_lark
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

# (grammar, alphabet): each is refused by lark's strict LALR(1) analysis
GRAMMARS = {
    # shift/reduce: lark alone resolves it as shift, which keeps the language here
    "dangling_else": ('start: "i" start | "i" start "e" start | "x"\n', "iex"),
    # reduce/reduce with the same lookahead: which rule to reduce shows two terminals later
    "lr2": ('start: a "x" "y" | b "x" "z"\na: "q"\nb: "q"\n', "qxyz"),
    # ambiguous: both alternatives derive "ab"
    "ambiguous": ('start: p | r\np: "a" "b" | "a" "b" "c"\nr: "a" "b" | "a" "d"\n', "abcd"),
    # even palindromes: no LR(k) parser for any k; a conflict at every position
    "palindromes": ('start: "a" start "a" | "b" start "b" |\n', "ab"),
    # right and left recursion in one: lists of a's then b's, split two ways
    "split": ('start: x y | y\nx: "a" | x "a"\ny: "a" y | "b"\n', "ab"),
}


def _earley(text: str) -> lark.Lark:
    return lark.Lark(text, parser="earley", lexer="dynamic")


def _parses(parser: lark.Lark, s: str) -> bool:
    try:
        parser.parse(s)
    except lark.exceptions.LarkError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_strict_lalr_refuses_each_grammar(name):
    with pytest.raises(ConstraintError):
        build_lark(GRAMMARS[name][0], strict=True)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_forking_engine_accepts_what_earley_parses(name):
    text, alphabet = GRAMMARS[name]
    engine = GrammarEngine(build_lark(text, forking=True))
    assert engine.forking
    earley = _earley(text)
    accepted = 0
    for n in range(0, 8):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            states = engine.feed_all(engine.initial, s.encode())
            ours = any(engine.at_eof(st) for st in states)
            assert ours == _parses(earley, s), s
            accepted += ours
            # a prefix is viable iff some sentence (among those enumerated, up to 4 more) extends it
            if n <= 3:
                longer = ("".join(c) for k in range(5) for c in itertools.product(alphabet, repeat=k))
                assert any(engine.viable(st) for st in states) == any(_parses(earley, s + t) for t in longer), s
    assert accepted > 0


def test_accepted_terminals_follow_every_action_of_a_conflict():
    stacks = LalrStacks(build_lark(GRAMMARS["lr2"][0], forking=True))
    assert stacks.forks
    (after_q,) = stacks.feed_all(stacks.initial, "Q")
    both = stacks.feed_all(after_q, "X")
    assert len(both) == 2  # reduced to `a` and to `b`, each then shifting "x"
    assert {t for st in both for t in stacks.accepted(st)} == {"Y", "Z"}
    with pytest.raises(ConstraintError, match="feed_all"):
        stacks.feed(after_q, "X")


def test_a_plain_table_has_no_forks_and_feeds_as_before():
    lark_parser = build_lark('start: "a" "b"\n', forking=True)
    stacks = LalrStacks(lark_parser)
    assert not stacks.forks
    assert stacks.feed_all(stacks.initial, "A") == [stacks.feed(stacks.initial, "A")]


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.from_tokenizer(load_qwen2_tokenizer())


def _allowed(mask: np.ndarray, size: int) -> np.ndarray:
    return np.unpackbits(mask.view(np.uint8), bitorder="little")[:size].astype(bool)


@pytest.mark.parametrize("name", ["ambiguous", "lr2", "palindromes"])
def test_masks_over_qwen_tokens_are_the_scalar_steps(vocab, name):
    """Every token a mask allows steps (and no other does), from Forks too; a random walk along
    allowed tokens ends in a sentence Earley parses."""
    text, _ = GRAMMARS[name]
    constraint = GrammarConstraint(text, vocab, parser=build_lark(text, forking=True), warmup_s=0.0)
    earley = _earley(text)
    # the tokens made of the grammar's own characters only, plus a sample of the others
    rng = random.Random(0)
    alphabet = set(GRAMMARS[name][1].encode())
    own = [i for i, b in enumerate(vocab.token_bytes) if b and set(b) <= alphabet]
    forks_seen = 0
    for _ in range(20):
        m = constraint.matcher()
        written = ""
        for _ in range(12):
            allowed = _allowed(m.bitmask(), vocab.size)
            for i in own + rng.sample(range(vocab.size), 200):
                if i in vocab.eos_token_ids:
                    continue
                assert allowed[i] == (constraint.step(m.state, i) is not None), (written, vocab.token_bytes[i])
            choices = [i for i in own if allowed[i]]
            if not choices or (m.is_accepting() and rng.random() < 0.3):
                break
            token = rng.choice(choices)
            m.advance(token)
            written += vocab.token_bytes[token].decode()
            forks_seen += isinstance(m.state, Forks)
        assert m.is_accepting() == _parses(earley, written), written
    assert forks_seen > 0 or name == "ambiguous"  # its two parses of "ab" meet only at the end


def test_what_every_parse_forces_is_forced(vocab):
    """After "qx" the text parses two ways (Forks); both force "yyyyyy", then they part."""
    text = 'start: a "x" "yyyyyy" "w" | b "x" "yyyyyy" "z"\na: "q"\nb: "q"\n'
    constraint = GrammarConstraint(text, vocab, parser=build_lark(text, forking=True), warmup_s=0.0)
    m = constraint.matcher()
    for token in vocab.ids_for_bytes(b"q")[:1] + vocab.ids_for_bytes(b"x")[:1]:
        m.advance(token)
    assert isinstance(m.state, Forks)
    assert m.forced_string() == "yyyyyy"
    forced = b"".join(vocab.token_bytes[i] for i in m.forced_token_ids())
    assert forced and b"yyyyyy".startswith(forced)  # the last token may be held back ("yw" is a token)
    for byte in b"yyyyyy":
        m.advance(vocab.ids_for_bytes(bytes([byte]))[0])
    assert m.forced_string() == ""  # "w" or "z"


def test_terminals_are_split_only_where_texts_are_shared_whole():
    """refine splits a free key beside a named one into `"run":` and the other keys; where one
    text is a proper prefix of another's (an integer beside a number) it declines."""
    from sgl_runtime.constrained.byte_dfa import ByteDFA
    from sgl_runtime.constrained.grammar.prefix_free import EQUAL, PREFIX
    from sgl_runtime.constrained.grammar.refine import refine

    text = 'start: A x | B y\nx: "<X>"\ny: "<Y>"\nA: "<A>"\nB: "<B>"\n'
    terminals = {"A": ByteDFA.from_regex(r'"[a-z]*":'), "B": ByteDFA.from_regex(r'"run":')}
    new_text, pieces = refine(text, terminals, {("A", "B"): EQUAL})
    assert "piece_a: " in new_text and "piece_b: " in new_text and "A: " not in new_text
    (shared,) = [p for p in pieces if p not in terminals and pieces[p].accepts('"run":')]
    assert not any(pieces[p].accepts('"run":') for p in pieces if p not in terminals and p != shared)
    assert refine(text, terminals, {("A", "B"): PREFIX}) is None
