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
import random
import re
import unicodedata

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
    _assert_exact_or_refused(prefix + body, lambda pattern: pattern, TEXTS)


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(global_flags, regexes)
def test_searched_regexes_agree_with_re_search(prefix, body):
    """Search (a JSON Schema `pattern`): the counted repeats a leading `.*` absorbs are cut to their
    minimum count before the subset construction; the language must not change."""
    pattern = prefix + body
    try:
        dfa = regex_to_dfa(pattern, search=True)
    except SelfCheckError as exc:
        pytest.fail(f"self-check caught a compiler bug: {exc}")
    except ConstraintError as exc:
        assert "unsupported regex feature" in str(exc) or "invalid regex" in str(exc), str(exc)
        return
    oracle = re.compile(pattern, re.ASCII)
    for text in TEXTS:
        assert dfa.accepts(text) == (oracle.search(text) is not None), (pattern, text)


@pytest.mark.parametrize(
    "pattern",
    [
        r"[ab]{1,3}_$",
        r"(?:a{2,4}|b)A",
        r"(?:(?:[ab]{2,}) )",
        r"^(^$)|([ab_ ]{1,1023}/$)$",
        r"(?=a)a{1,3}b",
        r"(?:ba{1,3})_",
        r"_(?:a{1,3}b)",
        r"^_a{1,3}",
        r"_a{1,3}\b",
    ],
)
def test_searched_counted_repeats(pattern):
    dfa = regex_to_dfa(pattern, search=True)
    oracle = re.compile(pattern, re.ASCII)
    for text in TEXTS + ["ab/", "b" * 40 + "/", "aaaaA", "x" * 30 + "aab_"]:
        assert dfa.accepts(text) == (oracle.search(text) is not None), (pattern, text)


@pytest.mark.parametrize(
    "pattern",
    [
        r"[a-z0-9][\.\-a-z0-9]{1,61}[a-z0-9]",  # a CloudFormation name pattern, unanchored
        r"a[ab]{2,30}b",
        r"(?:a|b_)[ab_]{1,20}(?:_|ba)",
    ],
)
def test_searches_stop_tracking_once_matched(pattern):
    """Once a searched pattern has matched, every continuation is accepted: the subset construction
    makes one state of all subsets holding such an NFA state, instead of following the counters
    still running inside them (the first pattern exceeded 200,000 subsets before)."""
    dfa = regex_to_dfa(pattern, search=True)
    assert len(dfa.edges) < 200
    oracle = re.compile(pattern, re.ASCII)
    rng = random.Random(0)
    texts = TEXTS + ["".join(rng.choice("ab_.-z9 ") for _ in range(rng.randrange(80))) for _ in range(3000)]
    for text in texts:
        assert dfa.accepts(text) == (oracle.search(text) is not None), (pattern, text)


def _assert_exact_or_refused(pattern: str, oracle_pattern, texts) -> None:
    """`pattern` compiles to a DFA that accepts exactly what `re` fullmatches with `oracle_pattern(pattern)`
    among `texts`, or is refused as unsupported/invalid (never a self-check failure)."""
    try:
        dfa = regex_to_dfa(pattern)
    except SelfCheckError as exc:
        pytest.fail(f"self-check caught a compiler bug: {exc}")
    except ConstraintError as exc:
        assert "unsupported regex feature" in str(exc) or "invalid regex" in str(exc), str(exc)
        return
    oracle = re.compile(oracle_pattern(pattern), re.ASCII)
    for text in texts:
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
        # a lookahead ending in an end anchor, a lookbehind starting with a start anchor
        (r"(?!\.$)(?!\.\.$)[.a]+", ["a", "...", "a."], [".", "..", ".\n"]),
        (r"(?=.*b\Z)[ab\n]*", ["b", "ab"], ["b\n", "ba", "a\nb"]),
        (r"(?m)(?!a$)[ab\n]+", ["ab", "aa"], ["a", "a\nb"]),
        (r"[ab]*(?<=^a)b|[ab]*(?<!\Ab)a", ["ab", "aa", "a"], ["bb", "aab", "ba"]),
        (r"(?!^[0-9]+\Z)[a-z0-9]+", ["a1", "1a"], ["12", "7"]),  # a lookahead starting with ^
        (r"(?m)[a1\n]*(?!^1)[a1\n]+", ["a1", "\n1"], ["1"]),
        (r"(?!(^|-)a)[ab-]+", ["ba", "-b", "b-a"], ["a", "-a", "ab"]),  # ^ in a leading lookahead's group
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


# ---- Unicode property escapes: the oracle substitutes each one by the members of a small
# alphabet whose unicodedata category has the property (independent of the compiler's ranges) ----

PROPERTY_ALPHABET = "aA1_ é日\u00a0-\u0663\u0301\n"
PROPERTY_TEXTS = ["".join(t) for n in range(4) for t in itertools.product(PROPERTY_ALPHABET, repeat=n)]
PROPERTIES = {  # escape body -> predicate on unicodedata.category
    "L": lambda cat: cat[0] == "L",
    "Lu": lambda cat: cat == "Lu",
    "Letter": lambda cat: cat[0] == "L",
    "Ll": lambda cat: cat == "Ll",
    "gc=Lo": lambda cat: cat == "Lo",
    "General_Category=Uppercase_Letter": lambda cat: cat == "Lu",
    "N": lambda cat: cat[0] == "N",
    "Nd": lambda cat: cat == "Nd",
    "P": lambda cat: cat[0] == "P",
    "Zs": lambda cat: cat == "Zs",
    "M": lambda cat: cat[0] == "M",
    "C": lambda cat: cat[0] == "C",
}
property_atoms = st.sampled_from(
    [f"\\{p}{{{name}}}" for name in PROPERTIES for p in "pP"]
    + [r"[\p{Lu}\d]", r"[^\p{L}]", r"[\P{L}a]", r"[_\p{N}-]", r"[^\P{Nd}\s]", r"[\p{M}\p{Zs}é]"]
)
property_regexes = st.recursive(
    st.one_of(property_atoms, atoms, st.tuples(property_atoms, quantifiers).map("".join)), _extend, max_leaves=5
)


def _oracle_pattern(pattern: str) -> str:
    """Each escape as the alphabet's members having (\\p) or lacking (\\P) the property: inside
    a class those members, outside a class of its own."""
    out, in_class = [], False
    for part in re.split(r"(\\[pP]\{[^}]*\}|\\.|\[\^?|\])", pattern):
        escape = re.fullmatch(r"\\([pP])\{([^}]*)\}", part)
        if escape:
            has = PROPERTIES[escape.group(2)]
            chars = [c for c in PROPERTY_ALPHABET if has(unicodedata.category(c)) == (escape.group(1) == "p")]
            body = "".join(re.escape(c) for c in chars)
            out.append(body if in_class else f"[{body}]" if chars else "(?!)")
            continue
        in_class = part.startswith("[") or (in_class and part != "]")
        out.append(part)
    return "".join(out)


@settings(
    max_examples=max(40, EXAMPLES // 10), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(global_flags, property_regexes)
def test_property_escapes_agree_with_unicodedata(prefix, body):
    _assert_exact_or_refused(prefix + body, _oracle_pattern, PROPERTY_TEXTS)


@pytest.mark.parametrize(
    "pattern, feature",
    [
        (r"\p{Script=Greek}", "Script=Greek"),
        (r"\p{sc=Latn}", "sc=Latn"),
        (r"\p{Alphabetic}", "Alphabetic"),
        (r"\p{l}", "\\p{l}"),
        (r"[a-\p{L}]", "endpoint"),
        (r"[\p{L}-z]", "endpoint"),
        (r"\p{L", "property escape"),
    ],
)
def test_property_refusals_name_the_property(pattern, feature):
    with pytest.raises(ConstraintError, match=re.escape(feature)):
        regex_to_dfa(pattern)


def test_property_escapes_tiny_vocabulary_exact_masks():
    """`\\p{Lu}\\p{Ll}*` over a vocabulary of whole and split UTF-8 characters."""
    from test_constrained_core import allowed_ids

    from sgl_runtime.constrained.byte_dfa import ByteDFA
    from sgl_runtime.constrained.constraint import DFAConstraint
    from sgl_runtime.constrained.vocabulary import Vocabulary

    #         0     1     2              3              4     5                6        7        8        9 (EOS)
    tokens = [b"A", b"a", "É".encode(), "é".encode(), b"1", "Ωω".encode(), b"\xc3", b"\x89", b"\xa9", None]
    constraint = DFAConstraint(ByteDFA.from_regex(r"\p{Lu}\p{Ll}*"), Vocabulary(tokens, eos_token_ids=[9]))
    matcher = constraint.matcher()
    assert allowed_ids(matcher.bitmask()) == [0, 2, 5, 6]  # upper case, or a lead byte of one
    matcher.advance(6)  # \xc3: then \x89 completes É (U+00C9, Lu); \xa9 would make é (Ll)
    assert allowed_ids(matcher.bitmask()) == [7]
    matcher.advance(7)
    assert allowed_ids(matcher.bitmask()) == [1, 3, 6, 9]  # lower case continues; EOS accepts
    matcher.advance(6)
    assert allowed_ids(matcher.bitmask()) == [8]


def test_schema_pattern_with_property_escape_is_exact():
    from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa

    dfa = schema_to_dfa({"type": "string", "pattern": r"^[\p{L}\p{Zs}'-]+$"})
    for text in ["José María", "O'Brien-Ωμέγα", "日本", "a"]:
        assert dfa.accepts(json.dumps(text, ensure_ascii=False)), text
    for text in ["", "R2D2", "a_b", "tab\tbed", "a\u0301"]:  # digits, `_`, a tab, a combining mark
        assert not dfa.accepts(json.dumps(text, ensure_ascii=False)), text
    # ECMA-262 \S inside a class: every code point but the ECMA blanks (U+00A0 and U+FEFF among them)
    dfa = schema_to_dfa({"type": "string", "pattern": r"^[\S ]+$"})
    for text, ok in [("a b", True), ("日 本", True), ("a\tb", False), ("a\u00a0b", False), ("\ufeff", False)]:
        assert dfa.accepts(json.dumps(text, ensure_ascii=False)) == ok, text


def _forget_compiled() -> None:
    """Drop the kept automata, so the next compile runs under the settings a test patched."""
    from sgl_runtime.constrained import automata_memo

    automata_memo.clear()
    regex_to_dfa.cache_clear()


@pytest.mark.parametrize("unrolled_states", [50_000, 0], ids=["unrolled", "from-the-right"])
@pytest.mark.parametrize(
    "pattern",
    [
        r"x((.|-+)?[ab]){0,12}y",  # a variable-width body: unrolled, or built as one automaton from the right
        r"(?:[ab]+_?){2,14}",
        r"(?:a|bb){3,12}b?",
        r"(?:ab|a){0,9}",
        r"(?:a\b|b ){0,9}",  # an assertion in the body: unrolled, with guards
        r"(?:[ab]{2}){0,10}",  # fixed width: unrolled
    ],
)
def test_long_optional_repeats_agree_with_re(monkeypatch, pattern, unrolled_states):
    from sgl_runtime.constrained import regex_nfa

    monkeypatch.setattr(regex_nfa, "UNROLLED_STATES", unrolled_states)
    _forget_compiled()
    dfa = regex_to_dfa(pattern)
    _forget_compiled()
    oracle = re.compile(pattern, re.ASCII)
    rng = __import__("random").Random(pattern)
    texts = TEXTS + ["".join(rng.choice("ab_- xy") for _ in range(rng.randrange(40))) for _ in range(600)]
    texts += ["x" + "a" * n + "y" for n in range(30)] + ["a" * n for n in range(30)] + ["ab_" * n for n in range(12)]
    accepted = 0
    for text in texts:
        expected = oracle.fullmatch(text) is not None
        assert dfa.accepts(text) == expected, (pattern, text)
        accepted += expected
    assert accepted > 5


def test_only_large_optional_repeats_of_variable_width_bodies_are_built_from_the_right(monkeypatch):
    from sgl_runtime.constrained import automata_ops, regex_nfa

    built = []

    def counting(dfa, n):
        built.append(n)
        return automata_ops.up_to(dfa, n)

    monkeypatch.setattr(regex_nfa, "up_to", counting)
    _forget_compiled()
    regex_to_dfa(r"z((.|-+)?[ab]){0,40}z")  # small: unrolled
    assert built == []
    monkeypatch.setattr(regex_nfa, "UNROLLED_STATES", 0)
    _forget_compiled()
    regex_to_dfa(r"z((.|-+)?[ab]){0,40}z")
    regex_to_dfa(r"z(?:[ab]{2}){0,40}z")  # fixed width: unrolled
    regex_to_dfa(r"z(?:a\b|b ){0,40}z")  # an assertion in the body: unrolled
    _forget_compiled()
    assert built == [40]


@pytest.mark.parametrize(
    "pattern",
    [
        r"(a|b)*a[ab]{1,9}",  # a counted class after a varying prefix: a copy could start at every `a`
        r"([ab/]+/){1,30}[ab]{1,8}",
        r"(?:a|ba){0,8}[ab]{2,9}",
        r"([ab]{2}|a){0,9}b{1,4}",
        r"((ab){0,4}|b)*a{1,7}",
        r"(a*b/?){2,40}",
    ],
)
def test_later_copies_of_a_repeat_are_dropped_exactly(pattern):
    """automata_ops.undominated: a subset keeps, per position of a repeat's body, only its earliest
    optional copy; every string of up to 11 characters of the pattern's alphabet gets re's verdict."""
    dfa = regex_to_dfa(pattern)
    oracle = re.compile(pattern)
    for n in range(12):
        for chars in itertools.product("ab/" if "/" in pattern else "ab", repeat=n):
            text = "".join(chars)
            assert dfa.accepts(text) == (oracle.fullmatch(text) is not None), (pattern, text)


def test_a_counted_class_after_a_varying_prefix_compiles_small():
    """An AWS role ARN pattern: its subset construction made one subset per set of copies of
    `[...]{1,64}` alive at once (over 200,000, refused); with later copies dropped it is small."""
    from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa

    arn = r"arn:(aws|aws-cn|aws-iso|aws-iso-[a-z]{1}|aws-us-gov):iam::[0-9]{12}:role\/(([!-\~]+/){1,511})?[A-Za-z0-9+=,.@_/-]{1,64}\Z"
    dfa = regex_to_dfa(arn, search=True)
    assert dfa.num_states < 500
    schema = {"type": "string", "pattern": arn}
    validator = __import__("jsonschema").Draft202012Validator(schema)
    language = schema_to_dfa(schema)
    verdicts = set()
    for role in ["a", "a/b/c", "path/to/" + "x" * 64, "path/to/" + "x" * 65, "p/" * 300 + "r", "bad path/r", "r/"]:
        value = "arn:aws:iam::123456789012:role/" + role
        verdicts.add(validator.is_valid(value))
        assert language.accepts(json.dumps(value)) == validator.is_valid(value), role
    assert verdicts == {True, False}


def _same_language(a, b) -> bool:
    # Edge order inside a state follows set iteration order (the hash seed): compare languages.
    from sgl_runtime.constrained.automata_ops import difference

    return a.num_states == b.num_states and difference(a, b).is_empty() and difference(b, a).is_empty()


def test_up_to_is_the_unrolled_repeat():
    from sgl_runtime.constrained.automata_ops import repeat, up_to

    body = regex_to_dfa(r"(.|-+)?[ab]")
    for n in (0, 1, 2, 5, 11):
        assert _same_language(up_to(body, n), repeat(body, 0, n))
    assert not _same_language(up_to(body, 5), repeat(body, 0, 6))
    star = regex_to_dfa("(?:ab?)*")  # closed under repetition: a fixpoint after one step
    assert _same_language(up_to(star, 10**6), star)


@pytest.mark.parametrize(
    "pattern",
    [
        r"^[ab]{2}\Z",
        r"\Aa_*\Z",
        r"^a",
        r"b\Z",
        r"^\Z",
        r"^",
        r"\Z",
        r"^a$",  # `$` also holds before a final newline: kept as a guard
        r"(?m)^a\Z",  # a line start under multiline: kept
        r"^a|b\Z",  # anchors inside a top-level alternative: kept
        r"^(?=a)[ab]+\Z",
        r"^(?<!a)b",
        # `^` opening a lookahead at the start, inside groups and alternatives (CloudFormation's
        # `^(?!(^(https?|ftp|file):\/\/))[a-z0-9-]+(\.service-now\.com)\Z`)
        r"^(?!(^(ab|b)-))[ab-]+\Z",
        r"\A(?=a)(?!(^|1)ab|(^b))[ab1]{1,3}",
    ],
)
def test_anchored_searches_agree_with_re_search(pattern):
    dfa = regex_to_dfa(pattern, search=True)
    oracle = re.compile(pattern, re.ASCII)
    for text in TEXTS + ["ab\n", "a\n", "\na", "b\nb"]:
        assert dfa.accepts(text) == (oracle.search(text) is not None), (pattern, text)


def test_an_anchored_search_is_a_plain_subset_construction(monkeypatch):
    """`^X\\Z` searched is X fully matched: no leading or trailing run, no anchor guards to track."""
    from sgl_runtime.constrained import regex_automaton

    plain = []
    original = regex_automaton._determinize_plain

    def counting(nfa, start, end):
        plain.append(start)
        return original(nfa, start, end)

    monkeypatch.setattr(regex_automaton, "_determinize_plain", counting)
    regex_to_dfa(r"^[0-9]{12}:[a-f]+\Z", search=True)
    assert plain
    plain.clear()
    regex_to_dfa(r"^[0-9]{12}:[a-f]+$", search=True)  # `$`: a guard
    assert not plain
