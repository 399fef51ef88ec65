"""Tiny hand-made vocabularies shared by the grammar tests (lark and GBNF forms), and reading their masks."""

from __future__ import annotations

import numpy as np

from sgl_runtime.constrained.vocabulary import Vocabulary

# Pieces of JSON that cut across its lexemes (a key with its colon, half a keyword, two closers at once).
JSON_TOKENS = [
    "{",
    "}",
    "[",
    "]",
    '"',
    "a",
    '"a"',
    ":",
    ",",
    "1",
    "12",
    "1.",
    ".5",
    " ",
    "true",
    "tr",
    "ue",
    "x",
    '"a":1}',
    "}]",
    "\n",
    "e3",
    "-",
    "0",
    "\\",
    'n"',
]


def make_vocab(tokens: list[str]) -> Vocabulary:
    """The tokens' UTF-8 bytes as ids 0..len-1, then EOS (id len(tokens))."""
    return Vocabulary([t.encode() for t in tokens] + [None], [len(tokens)])


def mask_bits(bitmask: np.ndarray, size: int | None = None) -> np.ndarray:
    """A packed bitmask as one 0/1 flag per token id (the first `size` ids, or every bit)."""
    return np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:size]


def masks_allow_exactly(constraint, tokens: list, valid: set, steps: int, frontier_cap: int | None = None) -> int:
    """Walk every allowed token sequence (the first `frontier_cap` texts per step) for `steps` steps,
    asserting each mask allows exactly the tokens that keep the text a prefix of a `valid` text
    and EOS exactly on a valid one; the number of token decisions checked."""
    prefixes = {v[:k] for v in valid for k in range(len(v) + 1)}
    frontier, checked = [("", constraint.matcher())], 0
    for _ in range(steps):
        nxt = []
        for text, matcher in frontier:
            bits = mask_bits(matcher.bitmask(), len(tokens) + 1)
            for i, token in enumerate(tokens):
                expected = (text + token) in prefixes
                assert bool(bits[i]) == expected, (text, token)
                checked += 1
                if expected:
                    child = matcher.copy()
                    child.advance(i)
                    nxt.append((text + token, child))
            assert bool(bits[len(tokens)]) == (text in valid), text
        frontier = nxt[:frontier_cap]
    return checked
