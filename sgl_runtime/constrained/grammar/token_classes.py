"""Tokens grouped by the byte classes they spell in one lexer context.

A lexer context reads bytes only through its byte classes (LexerContext.class_of), so two
tokens with the same sequence of classes go through it alike from every state: inside a
string, "hello" and "world" are the same walk. `TokenClasses.build(table, class_of)` groups the
vocabulary's tokens by class sequence (a 64-bit positional hash, then checked byte by byte, so
a collision only turns the grouping off), and the mask walk of a context pushes one token per
group, then gives each group's outcome to all its tokens.

A grouping only makes walks cheaper (a walk without one has the same outcome), so it is built
on a background thread (`build_later`) and no mask waits for it: a build costs a few full walks
(tens of milliseconds), which on the decode path would leave the GPU idle at small batches.
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import numpy as np

MAX_GROUP_RATIO = 0.5  # group only where it at least halves the walk
IN_BACKGROUND = True  # build_later on a background thread (False: at once, on the caller's)


class TokenClasses:
    """`reps`: one token per group; `members(reps)`: every token of those groups (CSR)."""

    def __init__(self, reps: np.ndarray, group_of: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> None:
        self.reps = reps  # [G] token ids
        self._group_of = group_of  # [vocab] group of a representative token, -1 otherwise
        self._order = order  # token ids sorted by group
        self._bounds = bounds  # [G + 1] each group's slice of `order`

    @classmethod
    def build(cls, table, class_of: np.ndarray) -> Optional["TokenClasses"]:
        """The grouping of `table`'s non-empty tokens in a context with byte classes `class_of`
        (None when it would not halve the tokens, or a hash collision shows)."""
        rows = table.all_rows
        lens = table.lens[rows]
        first, pos, weighted, owner = _layout(table)
        classes = class_of[table.flat[: pos.size]].astype(np.uint64)  # the tokens' bytes, in row order
        hashes = np.add.reduceat((classes + np.uint64(1)) * weighted, first)
        keys = hashes ^ (lens.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        _, rep_index, inverse = np.unique(keys, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        if len(rep_index) > MAX_GROUP_RATIO * len(rows):
            return None
        rep_of = rep_index[inverse]  # [tokens] the index (into rows) of each token's representative
        if not np.array_equal(lens[rep_of], lens):
            return None
        rep_bytes = first[rep_of][owner] + pos  # (a gather: np.repeat would hold the GIL)
        if not np.array_equal(class_of[table.flat[rep_bytes]].astype(np.uint64), classes):
            return None
        group_of = np.full(table.size, -1, dtype=np.int64)
        group_of[rows[rep_index]] = np.arange(len(rep_index))
        by_group = np.argsort(inverse.astype(np.uint16) if len(rep_index) <= 1 << 16 else inverse, kind="stable")
        bounds = np.searchsorted(inverse[by_group], np.arange(len(rep_index) + 1))
        return cls(rows[rep_index], group_of, rows[by_group], bounds)

    def members(self, reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(every token of the groups of `reps`, how many each rep stands for)."""
        groups = self._group_of[reps]
        lo = self._bounds[groups]
        counts = self._bounds[groups + 1] - lo
        index = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        return self._order[index], counts


_LAYOUTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # table -> _layout(table)
_LAYOUT_LOCK = threading.Lock()


def _layout(table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(each non-empty token's first byte in `table.flat`, each byte's offset inside its token, the
    hash weight of that offset, each byte's token as an index into `table.all_rows`), kept per
    table: the bytes of the non-empty tokens are `flat`'s first bytes, in row order."""
    with _LAYOUT_LOCK:
        found = _LAYOUTS.get(table)
        if found is None:
            lens = table.lens[table.all_rows]
            first = table.starts[table.all_rows]
            pos = np.arange(int(lens.sum())) - np.repeat(first, lens)
            weights = np.random.default_rng(0).integers(1, 2**63, size=int(lens.max(initial=1)), dtype=np.uint64)
            owner = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
            found = _LAYOUTS[table] = (first, pos, weights[pos] | np.uint64(1), owner)
        return found


_BUILDER: Optional[ThreadPoolExecutor] = None
_BUILDER_LOCK = threading.Lock()  # not _LAYOUT_LOCK, which a build holds while it lays out a new table


def build_later(table, class_of: np.ndarray) -> Future:
    """`TokenClasses.build(table, class_of)` as a future, computed on one background thread
    shared by every constraint (its numpy work runs mostly outside the GIL); a build that fails
    gives None, as one that would not pay off does."""
    global _BUILDER
    if not IN_BACKGROUND:
        done: Future = Future()
        done.set_result(_build_or_none(table, class_of))
        return done
    with _BUILDER_LOCK:
        if _BUILDER is None:
            _BUILDER = ThreadPoolExecutor(1, thread_name_prefix="token-classes")
        return _BUILDER.submit(_build_or_none, table, class_of)


def _build_or_none(table, class_of: np.ndarray) -> Optional[TokenClasses]:
    try:
        return TokenClasses.build(table, class_of)
    except Exception:  # noqa: BLE001 - walks go on through the trie without a grouping
        return None


def _forget_builder() -> None:
    global _BUILDER
    _BUILDER = None  # a forked child has no builder thread: it starts its own


os.register_at_fork(after_in_child=_forget_builder)
