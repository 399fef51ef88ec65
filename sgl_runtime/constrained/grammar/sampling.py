"""Random finished sentences of a grammar constraint, for tests and benchmarks.

A walk picks short tokens at random for its first steps, then steers to an end: EOS where the
grammar allows it, else (mostly) the first allowed of the grammar's closer tokens, which are
listed in an order that finishes every open structure.
"""

from __future__ import annotations

import random

import numpy as np

CLOSERS = {
    "json": ['"', "}", "]", ":", "0", ","],
    "arithmetic": [")", "1", "x", "+", ","],
    "sql": ["'", ")", " =", " FROM", " t", " ON", " BY", "1", "*", " a", ";"],
}


def closer_ids(name: str, vocab) -> list[int]:
    """The first token of each of the shipped grammar `name`'s closers."""
    return [vocab.encode(s)[0] for s in CLOSERS[name]]


def pick_walk_token(
    ids: np.ndarray, step: int, random_steps: int, lengths: np.ndarray, eos: int, closers: list[int], rng: random.Random
) -> int:
    """The walk's next token among the allowed `ids` (`lengths`: token byte lengths by id)."""
    if step < random_steps:
        short = ids[(lengths[ids] > 0) & (lengths[ids] <= 3)]
        return int(rng.choice((short if short.size and rng.random() < 0.7 else ids).tolist()))
    if eos in ids:
        return eos
    allowed = set(ids.tolist())
    candidates = [t for t in closers if t in allowed]
    if candidates and rng.random() < 0.85:
        return candidates[0]
    return int(rng.choice(candidates or ids.tolist()))
