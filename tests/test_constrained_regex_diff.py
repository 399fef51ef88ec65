"""Differential test: for many generated regexes and strings, `accepts` agrees with re.fullmatch.

Shorthand classes (\\d, \\w, \\s) are ASCII in constraints (as in interegular and JSON Schema
engines), so the reference is `re.fullmatch(pattern, text, re.ASCII)`.
"""

import random
import re

from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.constraint import DFAConstraint
from sgl_runtime.constrained.vocabulary import Vocabulary

ALPHABET = ["a", "b", "c", "0", "7", "é", "日", " ", "-", ".", "\n", "😀"]
ATOMS = {  # regex text -> characters of ALPHABET it matches
    "a": "a",
    "b": "b",
    "é": "é",
    "日": "日",
    "😀": "😀",
    r"\.": ".",
    r"\-": "-",
    " ": " ",
    "[ab]": "ab",
    "[^a]": "bc07é日 -.\n😀",
    "[a-c]": "abc",
    r"\d": "07",
    ".": "abc07é日 -.😀",
    "[é日]": "é日",
    r"[\s]": " \n",
    "[^ -~]": "é日\n😀",
    r"\w": "abc07",
    r"\W": "é日 -.\n😀",
}
QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"]
GROUP_QUANTIFIERS = ["", "", "*", "+", "?", "{2}"]  # nested counted repeats blow up interegular


def gen_regex(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth >= 2 or roll < 0.35:
        return rng.choice(list(ATOMS)) + rng.choice(QUANTIFIERS)
    if roll < 0.7:
        return "".join(gen_regex(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    alternatives = "|".join(gen_regex(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    return f"({alternatives})" + rng.choice(GROUP_QUANTIFIERS)


def gen_strings(rng: random.Random, dfa: ByteDFA, count: int) -> list[str]:
    """Random strings plus mutations of strings the DFA accepts (so both outcomes occur)."""
    out = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(count)]
    for _ in range(count):
        sample = _sample(rng, dfa)
        if sample is not None:
            out.append(sample)
            if sample:
                i = rng.randrange(len(sample))
                out.append(sample[:i] + rng.choice(ALPHABET) + sample[i + 1 :])
                out.append(sample[:i] + sample[i + 1 :])
    return out


def _sample(rng: random.Random, dfa: ByteDFA) -> "str | None":
    data, state = bytearray(), dfa.initial
    for _ in range(40):
        if dfa.accepting[state] and rng.random() < 0.3:
            break
        live = dfa.live_bytes(state)
        if not live.size:
            break
        b = int(rng.choice(live))
        data.append(b)
        state = int(dfa.transitions[state, b])
    try:
        return bytes(data).decode("utf-8") if dfa.accepting[state] else None
    except UnicodeDecodeError:
        return None


def test_accepts_agrees_with_re_fullmatch():
    rng = random.Random(1234)
    vocab = Vocabulary([bytes([b]) for b in range(256)], eos_token_ids=[])
    checked = accepted = 0
    for _ in range(400):
        pattern = gen_regex(rng)
        constraint = DFAConstraint(ByteDFA.from_regex(pattern), vocab)
        compiled = re.compile(pattern, re.ASCII)
        for text in gen_strings(rng, constraint.dfa, 8):
            expected = compiled.fullmatch(text) is not None
            assert constraint.accepts(text) == expected, (pattern, text)
            checked += 1
            accepted += expected
    assert checked > 4000 and accepted > 500 and checked - accepted > 500


def test_escapes_and_unicode_classes():
    cases = {
        r"\$\^\(\)\[\]\{\}\|\?\*\+\\": ["$^()[]{}|?*+\\"],
        r"[\u00e0-\u00ff]{2}": ["àÿ", "àz", "à"],
        r"\x41\t\n": ["A\t\n", "A \n"],
        r"(?:ab){1,2}c": ["abc", "ababc", "abababc", "c"],
        r"[^\"\\]{0,3}": ["", "日本語", 'a"b', "日本語x"],
    }
    for pattern, texts in cases.items():
        dfa = ByteDFA.from_regex(pattern)
        for text in texts:
            assert dfa.accepts(text) == (re.fullmatch(pattern, text) is not None), (pattern, text)
