"""GBNF grammars: syntax, exact languages (vs Python `re` on regular grammars), errors with
positions, syntax detection, and the same masks as the lark forms of the shipped grammars."""

from __future__ import annotations

import itertools
import random
import re

import lark
import numpy as np
import pytest
from tiny_vocab import JSON_TOKENS, make_vocab, mask_bits

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.gbnf_syntax import looks_like_gbnf
from sgl_runtime.constrained.grammar.source import (
    GRAMMAR_DIR,
    build_parser,
    resolve_grammar,
    shipped_gbnf_names,
)
from sgl_runtime.constrained.vocabulary import Vocabulary

ALPHABET = ["a", "b", "-", "0", "9", "\n", '"', "\\", "é", "☃"]
VOCAB = make_vocab(ALPHABET)

# (GBNF, an equivalent Python regex): each GBNF feature once, checked on every short string.
REGULAR = [
    ('root ::= "a" | "b"', r"a|b"),
    ('root ::= ("a" "b")* "-"', r"(?:ab)*-"),
    ('root ::= "a"? "b"+', r"a?b+"),
    ("root ::= [a-b]{2}", r"[a-b]{2}"),
    ("root ::= [a-b]{2,}", r"[a-b]{2,}"),
    ('root ::= [a-b]{1,3} "-"', r"[a-b]{1,3}-"),
    ("root ::= [^a\\n] [0-9]", r"[^a\n][0-9]"),
    ("root ::= [-ab] [a\\-]", r"[-ab][a\-]"),
    ('root ::= "\\"" [\\\\] "\\x2d" "\\u00e9" "\\U00002603"', r'"\\-é☃'),
    ('root ::= . "a"', r"(?s:.)a"),
    ('root ::= x "-" x\nx ::= "a" | y\ny ::= [0-9]+  # comment\n', r"(?:a|[0-9]+)-(?:a|[0-9]+)"),
    ('root ::= "" | "a" root', r"a*"),
    ('root ::=\n  "a"\n  | "b" "a"  # alternatives on new lines\n', r"a|ba"),
    ('root ::= num "9"\nnum ::= [0-9]+', r"[0-9]+9"),  # a greedy number lexeme would be wrong
    ('root ::= x x\nx ::= "a" | y\ny ::= [0-9]+', r"(?:a|[0-9]+){2}"),  # ambiguous but regular
    ('root ::= w ("-" w)*\nw ::= [ab]+', r"[ab]+(?:-[ab]+)*"),
]


def strings(max_len: int = 4):
    for n in range(max_len + 1):
        for t in itertools.product(ALPHABET, repeat=n):
            yield "".join(t)


@pytest.mark.parametrize("gbnf, regex", REGULAR)
def test_language_equals_python_re(gbnf, regex):
    c = compile_grammar(gbnf, VOCAB, warmup_s=0)
    rx = re.compile(regex)
    wrong = [s for s in strings() if c.accepts(s) != bool(rx.fullmatch(s))]
    assert not wrong, wrong[:5]


def test_recursive_grammar_matches_its_definition():
    c = compile_grammar('root ::= "(" root ")" root | ""', VOCAB, warmup_s=0)
    vocab_parens = Vocabulary([b"(", b")", b"()", b"(()", None], [4])
    m = compile_grammar('root ::= "(" root ")" root | ""', vocab_parens, warmup_s=0)
    for s in ["", "()", "(())()", "((()))"]:
        assert m.accepts(s)
    for s in ["(", ")(", "(()", "())"]:
        assert not m.accepts(s)
    assert not c.accepts("a")


def test_rules_sharing_a_prefix_need_the_right_linear_form():
    """`f` and `v` both start with letters: only a right-linear form defers the choice to '-'."""
    gbnf = 'root ::= f | v\nf ::= [a-b]+ "-" root "9"\nv ::= [a-b]+'
    nested = re.compile(r"[ab]+(?:-[ab]+(?:-[ab]+9)?9)?")  # the language to depth 2
    c = compile_grammar(gbnf, VOCAB, warmup_s=0)
    assert [s for s in strings(5) if c.accepts(s) != bool(nested.fullmatch(s))] == []
    assert c.accepts("ab-a-b-a999") and c.accepts("a-b-a99") and not c.accepts("a-b-a9")


def test_masks_follow_a_recursive_grammar_exactly():
    vocab = Vocabulary([b"(", b")", b"()", b"(()", None], [4])
    c = compile_grammar('root ::= "(" root ")" root | ""', vocab, warmup_s=0)
    m = c.matcher()
    for tok in [0, 3]:  # "(" then "(()": depth 2
        m.advance(tok)
    flags = mask_bits(m.bitmask(), 5)
    assert flags.tolist() == [1, 1, 1, 1, 0]  # no EOS while parentheses are open


@pytest.mark.parametrize(
    "gbnf, where, what",
    [
        ('root ::= "a" x', "line 1 column 14", "never defined"),
        ('root ::= "a"\nroot ::= "b"', "line 2 column 1", "defined twice"),
        ('root ::= "a" [b-', "line 1 column 14", "unexpected character"),
        ('root ::= "a"{3,1}', "line 1 column 13", "maximum below its minimum"),
        ('root ::= "\\q"', "line 1 column 10", "unknown escape"),
        ("root ::= [z-a]", "line 1 column 10", "reversed"),
        ('root ::= "\\xZZ"', "line 1 column 10", "hex digits"),
        ('root ::= ("a"', "", "unexpected end"),
        ('x ::= "a"', "", "no `root ::= ...` rule"),
    ],
)
def test_errors_name_line_and_column(gbnf, where, what):
    with pytest.raises(ConstraintError, match=re.escape(what)) as info:
        compile_grammar(gbnf, VOCAB, warmup_s=0)
    assert where in str(info.value) and "GBNF" in str(info.value)


def test_ambiguous_and_empty_grammars_are_refused():
    with pytest.raises(ConstraintError, match="ambiguous or needs more than one character of lookahead.*'a'"):
        compile_grammar('root ::= a | b\na ::= "x" a | "x"\nb ::= "x" b "y" | "x"', VOCAB, warmup_s=0)
    with pytest.raises(ConstraintError, match="matches no string"):
        compile_grammar('root ::= "a" root', VOCAB, warmup_s=0)


def test_syntax_detection_and_forcing():
    assert looks_like_gbnf('# c\nroot ::= "a"') and not looks_like_gbnf('start: "a"\n// x ::= y')
    assert resolve_grammar("json")[1] == "lark" and resolve_grammar("json.gbnf")[1] == "gbnf"
    assert resolve_grammar("json", "gbnf")[0] == (GRAMMAR_DIR / "json.gbnf").read_text()
    assert compile_grammar('root ::= "a"', VOCAB, syntax="gbnf", warmup_s=0).accepts("a")
    with pytest.raises(ConstraintError, match="invalid lark grammar"):
        compile_grammar('root ::= "a"', VOCAB, syntax="lark", warmup_s=0)
    with pytest.raises(ConstraintError, match="invalid GBNF grammar"):
        compile_grammar('start: "a"', VOCAB, syntax="gbnf", warmup_s=0)
    with pytest.raises(ConstraintError, match="syntax must be one of"):
        compile_grammar('root ::= "a"', VOCAB, syntax="ebnf", warmup_s=0)
    with pytest.raises(ConstraintError, match="is a .lark file"):
        compile_grammar("json.lark", VOCAB, syntax="gbnf", warmup_s=0)


# ---- shipped grammars: the same masks as the lark forms -------------------------------------

TINY = {
    "json": JSON_TOKENS + ["é", ' "', "\t\t", "null"],
    "arithmetic": [
        "1",
        "12",
        ".",
        ".5",
        "x",
        "x1",
        "foo",
        "(",
        ")",
        ",",
        "+",
        "-",
        "*",
        "/",
        " ",
        "\t",
        " (",
        "f(",
        "1+",
        ")*",
        "_a",
        "é",
    ],
}


def walk_and_compare(a, b, vocab_size: int, eos: int, walks: int, steps: int, seed: int, pick=None) -> int:
    """Random walks driven by `a`'s masks; asserts `b` gives the same mask at every step."""
    rng, compared = random.Random(seed), 0
    for _ in range(walks):
        ma, mb, text = a.matcher(), b.matcher(), b""
        for step in range(steps):
            x, y = ma.bitmask(), mb.bitmask()
            if not np.array_equal(x, y):
                fx, fy = (mask_bits(m, vocab_size) for m in (x, y))
                diff = [(a.vocabulary.token_bytes[i], int(fx[i])) for i in np.flatnonzero(fx != fy)[:5]]
                raise AssertionError(f"masks differ after {text!r}: (token, allowed by lark) {diff}")
            compared += 1
            ids = np.flatnonzero(mask_bits(x, vocab_size))
            if not ids.size:
                break
            tok = pick(ids, step, rng) if pick else int(rng.choice(ids.tolist()))
            if tok == eos:
                break
            ma.advance(tok)
            mb.advance(tok)
            text += a.vocabulary.token_bytes[tok]
    return compared


def test_shipped_gbnf_grammars_are_listed():
    assert {"json", "arithmetic"} <= set(shipped_gbnf_names())


@pytest.mark.parametrize("name", sorted(TINY))
def test_same_masks_as_lark_on_a_tiny_vocabulary(name):
    tokens = TINY[name]
    vocab = make_vocab(tokens)
    lark_form = compile_grammar(name, vocab, warmup_s=0)
    gbnf_form = compile_grammar(f"{name}.gbnf", vocab, warmup_s=0)
    assert walk_and_compare(lark_form, gbnf_form, len(tokens) + 1, len(tokens), walks=150, steps=14, seed=0) > 1000


@pytest.mark.parametrize("name", sorted(TINY))
def test_gbnf_sentences_parse_with_lark(name):
    """Finished random walks of the GBNF form are sentences of the .lark grammar."""
    tokens = TINY[name]
    vocab = make_vocab(tokens)
    c = compile_grammar(f"{name}.gbnf", vocab, warmup_s=0)
    parser = lark.Lark((GRAMMAR_DIR / f"{name}.lark").read_text(), parser="lalr")
    own = build_parser(f"{name}.gbnf")
    rng, done = random.Random(1), 0
    for _ in range(200):
        m, text = c.matcher(), ""
        for _ in range(30):
            ids = np.flatnonzero(mask_bits(m.bitmask(), len(tokens) + 1))
            if len(tokens) in ids and (rng.random() < 0.3 or len(ids) == 1):
                break
            tok = int(rng.choice([i for i in ids.tolist() if i != len(tokens)]))
            m.advance(tok)
            text += tokens[tok]
        if m.is_accepting():
            parser.parse(text)
            own.parse(text)
            done += 1
    assert done > 20


@pytest.fixture(scope="module")
def qwen_vocab():
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    tokenizer = load_qwen2_tokenizer()
    return tokenizer, Vocabulary.from_tokenizer(tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
def test_same_masks_as_lark_with_the_qwen_tokenizer(name, qwen_vocab):
    from sgl_runtime.constrained.grammar.sampling import closer_ids, pick_walk_token

    tokenizer, vocab = qwen_vocab
    lark_form = compile_grammar(name, vocab, warmup_s=0)
    gbnf_form = compile_grammar(f"{name}.gbnf", vocab, warmup_s=0)
    lengths = np.array([len(b) if b else 0 for b in vocab.token_bytes])
    eos, closers = vocab.eos_token_ids[0], closer_ids(name, tokenizer)

    def pick(ids, step, rng):
        return pick_walk_token(ids, step, 12, lengths, eos, closers, rng)

    assert walk_and_compare(lark_form, gbnf_form, vocab.size, eos, walks=4, steps=24, seed=2, pick=pick) > 40
