"""Exact or refused: generated regexes with lookaround, anchors, word boundaries, lazy and
possessive quantifiers, atomic groups and inline flags either compile to an automaton that
agrees with `re.fullmatch(pattern, text, re.ASCII)` on every short string, or are refused with
a ConstraintError naming the feature; never silently wrong, never refused by the self-check.

CI runs a fixed number of examples (~20 s on one core); REGEX_EXACT_EXAMPLES=20000 runs the
long profile (`REGEX_EXACT_EXAMPLES=20000 python -m pytest tests/test_regex_exact.py`).
"""

import itertools
import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_constrained_core import _byte_level_tokenizer

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_automaton import regex_to_dfa
from sgl_runtime.constrained.regex_selfcheck import SelfCheckError

EXAMPLES = int(os.environ.get("REGEX_EXACT_EXAMPLES", "800"))
TEXT_ALPHABET = "abA_ \n"
TEXTS = ["".join(t) for n in range(5) for t in itertools.product(TEXT_ALPHABET, repeat=n)]

atoms = st.sampled_from(["a", "b", "A", "[ab]", "[^a]", ".", r"\w", r"\W", r"\s", "[a-bA]", r"\n", "_", " "])
anchors = st.sampled_from(["^", "$", r"\A", r"\Z", r"\b", r"\B"])
fixed = st.sampled_from(["a", "b", "ab", "[ab]", r"\w", ".", "a|b", "aA", r"\s"])  # lookbehind bodies
quantifiers = st.sampled_from(
    ["", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "*?", "+?", "??", "{1,2}?", "*+", "++", "?+", "{1,2}+"]
)
flags = st.sampled_from(["i", "s", "m", "is", "im", "ms"])


def _extend(inner):
    return st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(inner, quantifiers).map(lambda p: f"(?:{p[0]}){p[1]}"),
        inner.map(lambda r: f"(?={r})"),
        inner.map(lambda r: f"(?!{r})"),
        fixed.map(lambda r: f"(?<={r})"),
        fixed.map(lambda r: f"(?<!{r})"),
        inner.map(lambda r: f"(?>{r})"),
        st.tuples(flags, inner).map(lambda p: f"(?{p[0]}:{p[1]})"),
    )


regexes = st.recursive(st.one_of(atoms, anchors, st.tuples(atoms, quantifiers).map("".join)), _extend, max_leaves=6)
global_flags = st.sampled_from(["", "", "", "(?i)", "(?s)", "(?m)"])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(global_flags, regexes)
def test_compiled_regexes_agree_with_re(prefix, body):
    pattern = prefix + body
    try:
        dfa = regex_to_dfa(pattern)
    except SelfCheckError as exc:
        pytest.fail(f"self-check caught a compiler bug: {exc}")
    except ConstraintError as exc:
        assert "unsupported regex feature" in str(exc) or "invalid regex" in str(exc), str(exc)
        return
    oracle = re.compile(pattern, re.ASCII)
    for text in TEXTS:
        assert dfa.accepts(text) == (oracle.fullmatch(text) is not None), (pattern, text)


def test_issue_reproduction_lookahead_is_exact():
    constraint = compile_constraint("regex", r"(?!ab)[ab]{1,4}", _byte_level_tokenizer())
    for text in ["a", "b", "aaaa", "ba", "bab", "aaaaa", "ab", "abab", ""]:
        assert constraint.accepts(text) == (re.fullmatch(r"(?!ab)[ab]{1,4}", text) is not None), text


@pytest.mark.parametrize(
    "pattern, feature",
    [
        (r"(a)\1", "backreference"),
        (r"(a)?(?(1)b|c)", "conditional group"),
        (r"(?>a|ab)c", "atomic group"),
        (r"(?:a|ab)*+c", "possessive quantifier"),
        (r"(?=a\b)a", "an assertion"),
        (r"(?u)\w", "(?u)"),
    ],
)
def test_refusals_name_the_feature(pattern, feature):
    with pytest.raises(ConstraintError, match=re.escape(feature)):
        regex_to_dfa(pattern)


@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        (r"^(?=.*[A-Z])(?=.*\d)\w{4,8}$", ["abC1", "1234Z"], ["abcd1", "ABCD", "aB1"]),
        (r"\d+(?<!0)", ["10001", "7"], ["10", "0"]),
        (r"[a-z]++z", [], ["az", "zz"]),
        (r"a\b[ -]\B-", ["a -", "a--"], ["a-", "ab-", "a- "]),
        (r"(?i)Hello(?-i: World)", ["hELLO World"], ["hello world"]),
        (r"(?m)a$\n^b$\n?", ["a\nb", "a\nb\n"], ["ab"]),
    ],
)
def test_known_regexes(pattern, yes, no):
    try:
        dfa = regex_to_dfa(pattern)
    except ConstraintError as exc:
        assert not yes and "no string" in str(exc)
        return
    for text in yes + no:
        assert dfa.accepts(text) == (re.fullmatch(pattern, text, re.ASCII) is not None), text
    assert all(dfa.accepts(t) for t in yes) and not any(dfa.accepts(t) for t in no)


PATTERN_TEXTS = ["".join(t) for n in range(5) for t in itertools.product("ab1 -", repeat=n)]


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?!ab)[ab]{1,4}",
        r"^(?!ab)[ab]{1,4}$",
        r"^a",
        r"b$",
        r"\bab\b",
        r"a\B",
        r"(?<=a)b",
        r"^(?=.*\d).{2,}$",
        r"^[ab]+(?<!b)$",
    ],
)
def test_json_schema_patterns_are_exact(pattern):
    """A pattern searches (ECMA-262): the schema accepts exactly what jsonschema accepts."""
    from jsonschema import Draft202012Validator

    from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa

    schema = {"type": "string", "pattern": pattern}
    dfa, validator = schema_to_dfa(schema), Draft202012Validator(schema)
    for text in PATTERN_TEXTS:
        assert dfa.accepts(json.dumps(text)) == validator.is_valid(text), (pattern, text)
