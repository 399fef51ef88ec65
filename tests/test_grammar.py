"""Grammar constraints on tiny hand-made vocabularies: exact masks, lark agreement, errors."""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys

import lark
import pytest
from grammar_oracle import lark_parses, lark_viable
from tiny_vocab import JSON_TOKENS, make_vocab, mask_bits

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.source import GRAMMAR_DIR, shipped_grammar_names

EOS = len(JSON_TOKENS)


def allowed_strings(matcher, tokens: list[str]) -> set[str]:
    bits = mask_bits(matcher.bitmask())
    out = {tokens[i] for i in range(len(tokens)) if bits[i]}
    if bits[len(tokens)]:
        out.add("<eos>")
    return out


def matcher_after(constraint, tokens: list[str], pieces: list[str]):
    m = constraint.matcher()
    for p in pieces:
        m.advance(tokens.index(p))
    return m


@pytest.fixture(scope="module")
def json_tiny():
    return compile_grammar("json", make_vocab(JSON_TOKENS))


@pytest.mark.parametrize(
    "pieces, expected",
    [
        ([], {"{", "[", '"', '"a"', "1", "12", "1.", " ", "true", "tr", "\n", "-", "0"}),
        (["{"], {"}", '"', '"a"', " ", "\n", '"a":1}'}),
        (["{", '"a"'], {":", " ", "\n"}),
        (["[", "1."], {"1", "12", "0"}),
        (["[", "12"], {"]", ",", "1", "12", "1.", ".5", " ", "\n", "e3", "0"}),
        (["[", "tr"], {"ue"}),
        (['"a"'], {" ", "\n", "<eos>"}),
        (
            ['"'],
            {
                "a",
                '"',
                'n"',
                " ",
                "1",
                "12",
                "1.",
                ".5",
                "true",
                "tr",
                "ue",
                "x",
                "{",
                "}",
                "[",
                "]",
                "}]",
                ":",
                ",",
                "e3",
                "-",
                "0",
                "\\",
            },
        ),
        (['"', "\\"], {'"', "\\", 'n"', "true", "tr", "ue", '"a"'}),  # escapes: \" \\ \n \t \u
        (["0"], {"<eos>", " ", "\n", ".5", "e3"}),
    ],
)
def test_json_exact_masks(json_tiny, pieces, expected):
    assert allowed_strings(matcher_after(json_tiny, JSON_TOKENS, pieces), JSON_TOKENS) == expected


def test_json_masks_agree_with_lark_oracle_on_all_short_prefixes(json_tiny):
    parser = lark.Lark((GRAMMAR_DIR / "json.lark").read_text(), parser="lalr")
    seen = 0
    for n in range(4):
        for pieces in itertools.product(JSON_TOKENS[:20], repeat=n):
            m = json_tiny.matcher()
            try:
                for p in pieces:
                    m.advance(JSON_TOKENS.index(p))
            except ConstraintError:
                assert not lark_viable(parser, "".join(pieces))
                continue
            prefix = "".join(pieces)
            got = allowed_strings(m, JSON_TOKENS)
            for t in JSON_TOKENS:
                assert (t in got) == lark_viable(parser, prefix + t), (prefix, t)
            assert ("<eos>" in got) == lark_parses(parser, prefix), prefix
            seen += 1
    assert seen > 300


def test_advance_rejects_what_the_mask_forbids(json_tiny):
    m = json_tiny.matcher()
    with pytest.raises(ConstraintError, match="not allowed"):
        m.advance(JSON_TOKENS.index("}"))
    with pytest.raises(ConstraintError, match="EOS"):
        m.advance(EOS)
    m.advance(JSON_TOKENS.index('"a"'))
    assert m.is_accepting() and not m.is_terminated()
    m.advance(EOS)
    assert m.is_terminated() and m.is_accepting()
    with pytest.raises(ConstraintError):
        m.advance(JSON_TOKENS.index(" "))


def test_copy_is_independent(json_tiny):
    m = json_tiny.matcher()
    m.advance(JSON_TOKENS.index("["))
    c = m.copy()
    c.advance(JSON_TOKENS.index("]"))
    assert c.is_accepting() and not m.is_accepting()


def test_whitespace_is_bounded():
    tokens = [" ", "1"]
    c = compile_grammar("json", make_vocab(tokens), max_ignore_bytes=3)
    m = c.matcher()
    for _ in range(3):
        assert " " in allowed_strings(m, tokens)
        m.advance(0)
    assert allowed_strings(m, tokens) == {"1"}
    assert not c.accepts("    1") and c.accepts("   1   ")


ARITH_TOKENS = ["1", ".", "5", "1.", "x", "+", "-", "(", ")", " ", "f(", ",", "*", ".5"]


@pytest.mark.parametrize(
    "pieces, expected",
    [
        ([], {"1", "1.", "5", "x", "-", "(", " ", "f("}),
        (["1."], {"1", "5"}),  # "1." lexes as NUMBER "1" then "." unless a digit follows
        (["1"], {"1", ".", "5", "1.", "+", "-", ")", " ", "*", ".5", "<eos>"} - {")"}),
        (["f(", "1"], {"1", ".", "5", "1.", "+", "-", ")", " ", "*", ".5", ","}),
        (["x"], {"1", "5", "x", "+", "-", " ", "*", "(", "f(", "<eos>"}),
    ],
)
def test_arithmetic_exact_masks(pieces, expected):
    c = compile_grammar("arithmetic", make_vocab(ARITH_TOKENS))
    assert allowed_strings(matcher_after(c, ARITH_TOKENS, pieces), ARITH_TOKENS) == expected


def test_sql_keywords_follow_lark_retyping():
    tokens = ["SELECT", " ", "a", " FROM", " from", " t", " fromage", "select", " WHERE", " x", " =", " 1", ";"]
    c = compile_grammar("sql", make_vocab(tokens))
    parser = lark.Lark((GRAMMAR_DIR / "sql.lark").read_text(), parser="lalr")
    for prefix in [
        "",
        "SELECT",
        "SELECT a",
        "SELECT a FROM",
        "SELECT a fromage",
        "select a from t",
        "SELECT a FROM t WHERE x =",
        "SELECT a FROM t WHERE x = 1",
    ]:
        m = c.matcher()
        state = c.engine.feed(c.engine.initial, prefix.encode())
        assert state is not None, prefix
        m.state = state
        got = allowed_strings(m, tokens)
        for t in tokens:
            assert (t in got) == lark_viable(parser, prefix + t), (prefix, t)
        assert ("<eos>" in got) == lark_parses(parser, prefix), prefix


@pytest.mark.parametrize("name", ["json", "arithmetic", "sql"])
def test_accepts_agrees_with_lark(name):
    parser = lark.Lark((GRAMMAR_DIR / f"{name}.lark").read_text(), parser="lalr")
    c = compile_grammar(name, make_vocab(["x"]))
    rng = random.Random(1)
    samples = SAMPLES[name]
    mutated = []
    for s in samples:
        for _ in range(15):
            i = rng.randrange(len(s) + 1)
            op = rng.random()
            if op < 0.4:
                mutated.append(s[:i] + s[i + 1 :])
            elif op < 0.8:
                mutated.append(s[:i] + rng.choice(" ,:\"[]{}()+-*1.aeE'=;") + s[i:])
            else:
                mutated.append(s[:i])
    for text in samples + mutated:
        assert c.accepts(text) == lark_parses(parser, text), text
    assert all(c.accepts(s) for s in samples)


SAMPLES = {
    "json": [
        json.dumps(v)
        for v in [{"a": [1, 2.5, -3e-2, True, None], "b": {"c": "d\u00e9\\n"}}, [], {}, "x", 0, [[[]]], {"k": False}]
    ]
    + ['{ "a" :\n[ 1 , 2 ] }'],
    "arithmetic": ["1 + 2 * x", "-(3.5 - y) / f(1, 2)", "g()", "--1", "a*b*c"],
    "sql": [
        "SELECT a FROM t",
        "select distinct a, b AS c from t1 x where a > 1 and not b = 'q' order by a desc limit 3;",
        "SELECT count(*) FROM t LEFT JOIN u ON t.id = u.id GROUP BY a, b",
        "SELECT * FROM t WHERE (a < 1 OR b <> 2) AND c >= 3.5",
    ],
}


def test_inline_grammar_text():
    g = 'start: "yes" | "no" | "n/a" NUMBER\nNUMBER: /[0-9]+/\n'
    tokens = ["yes", "no", "n", "/a", "1", "12", "y"]
    c = compile_grammar(g, make_vocab(tokens))
    assert allowed_strings(c.matcher(), tokens) == {"yes", "no", "n", "y"}
    m = matcher_after(c, tokens, ["n"])
    assert allowed_strings(m, tokens) == {"/a"}
    m = matcher_after(c, tokens, ["n", "/a"])
    assert allowed_strings(m, tokens) == {"1", "12"}
    m.advance(tokens.index("12"))
    assert allowed_strings(m, tokens) == {"1", "12", "<eos>"}
    assert c.accepts("n/a7") and not c.accepts("n/a")


def test_bad_grammars_raise_constraint_error_with_lark_message():
    with pytest.raises(ConstraintError, match="invalid lark grammar.*"):
        compile_grammar("start: foo\n", make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="invalid lark grammar"):
        compile_grammar('start: "a" | \n  %%%', make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="unknown grammar 'nosuch'"):
        compile_grammar("nosuch", make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="unknown grammar option"):
        compile_grammar("json", make_vocab(["x"]), bogus=1)
    with pytest.raises(ConstraintError, match="ABC.*lookaround"):
        compile_grammar("start: ABC\nABC: /(?<=a)b/\n", make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="B: lookaround"):
        compile_grammar('start: A B\nA: "a"\nB: /b(?=c)/\n', make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="zero-width"):
        compile_grammar("start: A\nA: /a*/\n", make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="without a pattern"):
        compile_grammar("start: A\n%declare A\n", make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="non-empty string"):
        compile_grammar("", make_vocab(["x"]))
    with pytest.raises(ConstraintError, match="A: Python's re matches"):  # re takes "a" from "ab"
        compile_grammar("start: A\nA: /a|ab/\n", make_vocab(["x"]))


def test_shipped_grammars_by_name_and_file_name():
    assert {"json", "arithmetic", "sql"} <= set(shipped_grammar_names())
    c = compile_grammar("json.lark", make_vocab(["x"]))
    assert c.accepts('{"a": 1}')


def test_forced_string_and_tokens_on_json(json_tiny):
    m = matcher_after(json_tiny, JSON_TOKENS, ["{", '"a"'])
    assert m.forced_string() == ":"
    m = matcher_after(json_tiny, JSON_TOKENS, ["[", "tr"])
    assert m.forced_string() == "ue"
    assert matcher_after(json_tiny, JSON_TOKENS, ["["]).forced_string() == ""
    assert matcher_after(json_tiny, JSON_TOKENS, ['"a"']).forced_string() == ""


COMMON_GRAMMAR = r"""
start: item+
item: ESCAPED_STRING | SIGNED_NUMBER | CNAME
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.CNAME
%import common.WS
%import common.C_COMMENT
%ignore WS
%ignore C_COMMENT
"""


def test_lark_common_terminals_lookbehind_and_lazy_comments_match_lark():
    tokens = ['"', "a", "\\", '"a"', "/*", "*/", "*", " ", "1", ".", "e", "\n", "+", '"\\"']
    c = compile_grammar(COMMON_GRAMMAR, make_vocab(tokens))
    parser = lark.Lark(COMMON_GRAMMAR, parser="lalr")
    checked = 0
    for n in range(4):
        for pieces in itertools.product(tokens, repeat=n):
            prefix = "".join(pieces)
            state = c.engine.feed(c.engine.initial, prefix.encode())
            if state is None or not c.engine.viable(state):
                assert not lark_viable(parser, prefix), prefix
                continue
            m = c.matcher()
            m.state = state
            got = allowed_strings(m, tokens)
            for t in tokens:
                assert (t in got) == lark_viable(parser, prefix + t), (prefix, t)
            assert ("<eos>" in got) == lark_parses(parser, prefix), prefix
            checked += 1
    assert checked > 500
    assert c.accepts('"a\\"b" /* x */ 1.5e3 /* y */ name') and not c.accepts("/* a */ */ 1")


def test_shipped_grammars_are_installed_as_package_data(tmp_path):
    """A non-editable install resolves the sgl_runtime/grammars symlink into real files."""
    repo = GRAMMAR_DIR.parent.parent
    src = tmp_path / "src"
    src.mkdir()
    for name in ["pyproject.toml", "README.md"]:
        if (repo / name).exists():
            shutil.copy(repo / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ["sgl_lang", "sgl_runtime", "grammars"]:
        shutil.copytree(repo / name, src / name, symlinks=True, ignore=ignore)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    installed = target / "sgl_runtime" / "grammars"
    assert installed.is_dir() and not installed.is_symlink()
    assert sorted(p.name for p in installed.glob("*.lark")) == sorted(p.name for p in GRAMMAR_DIR.glob("*.lark"))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sgl_runtime.constrained.grammar.source import "
            "shipped_grammar_names, grammar_text; print(shipped_grammar_names(), len(grammar_text('json')))",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "['arithmetic', 'json', 'sql']" in out


def test_unicode_class_escapes_match_python_re():
    g = 'start: WORD (" " WORD)*\nWORD: /\\w+/\n'
    c = compile_grammar(g, make_vocab(["x"]))
    parser = lark.Lark(g, parser="lalr")
    for text in ["caf\u00e9 \u4e2d\u6587", "a_1 \u0663\u0664", "a-b", "a  b", "\u00e9"]:
        assert c.accepts(text) == lark_parses(parser, text), text
    digits = compile_grammar("start: /[\\d.]+/ /\\s/ /\\S/\n", make_vocab(["x"]))
    assert digits.accepts("\u0663.5\u2003x") and not digits.accepts("a.5 x")


def test_forced_string_skips_optional_blanks_and_spans_keywords():
    g = 'start: "let" NAME "=" "go" "to" NAME\nNAME: /[a-z]+/\n%ignore " "\n'
    tokens = ["let", "go", "to", "goto", " ", "x", "="]
    c = compile_grammar(g, make_vocab(tokens))
    m = c.matcher()
    assert m.forced_string() == "let" and m.forced_token_ids() == [tokens.index("let")]
    for piece in ["let", " ", "x", " ", "="]:
        m.advance(tokens.index(piece))
    assert m.forced_string() == "goto"
    ids = m.forced_token_ids()  # 'goto' is one token; nothing longer could span it
    assert ids == [tokens.index("goto")]
    m.advance(ids[0])
    assert m.forced_string() == ""  # a NAME follows: many continuations


def test_case_insensitive_keywords_fold_like_python_re():
    c = compile_grammar("sql", make_vocab(["x"]))
    parser = lark.Lark((GRAMMAR_DIR / "sql.lark").read_text(), parser="lalr")
    for text in [
        "\u017felect a from t",
        "SELECT a FROM t \u0131nner join u on a = b",
        "select \u212a from t",
        "SELECT a FROM t WH\u0130RE x = 1",
        "sElEcT a FrOm t",
    ]:
        assert c.accepts(text) == lark_parses(parser, text), text


def test_constraints_over_one_vocabulary_share_one_read_only_token_table():
    vocab = make_vocab(JSON_TOKENS)
    first = compile_grammar("json", vocab, warmup_s=0.0)
    second = compile_grammar("arithmetic", vocab, warmup_s=0.0)
    assert first.table is second.table  # built once per vocabulary, not once per grammar
    assert compile_grammar("json", make_vocab(JSON_TOKENS), warmup_s=0.0).table is not first.table
    with pytest.raises(ValueError):
        first.table.lens[0] = 99  # shared between constraints and threads: nobody may write it
