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
