"""The trie walk of the whole vocabulary (grammar/token_trie.py) against the column walk of every
token (grammar/walk.walk): the same tokens end inside the token being read, in the same lexer
states with the same last accepts, and the same tokens close it, with the same types and ends,
from every lexer state reached along Qwen2.5 tokenizations of grammar and JSON-Schema texts."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future

import numpy as np
import pytest

from sgl_runtime.constrained.compiler import compile_constraint
from sgl_runtime.constrained.counted import packed_steps
from sgl_runtime.constrained.grammar import string_walk
from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.token_trie import TokenTrie
from sgl_runtime.constrained.grammar.walk import TokenTable, walk
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9a-f]{8}$"},
        "note": {"type": "string", "maxLength": 300},
        "n": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a b", 'c\\"d', "\u00e9"]}},
    },
    "minProperties": 2,
}
TEXTS = {
    "json": '{"a": [1, -2.5e3, "x\\u00e9y\\n"], "b": {"c": null, "d": true}}',
    "sql": "SELECT a, COUNT(*) FROM t WHERE x = 'ab c' AND y >= 2 ORDER BY a DESC;",
    "schema": json.dumps(
        {"id": "0123abcd", "note": 'caf\u00e9 "q" \\ ' * 3, "n": -0.5, "tags": ["a b", "\u00e9"]},
        ensure_ascii=False,
        separators=(",", ":"),
    ),
}


@pytest.fixture(scope="module")
def tok():
    return load_qwen2_tokenizer()


def _flat(run) -> tuple:
    """A run's outcomes as sets: (token, final state, last accept), (token, type, in tail, offset)."""
    inside = set()
    for s, g in run.inside:
        la = g.la if g.la is not None else [None] * len(g.rows)
        inside |= {(int(r), int(s), None if a is None else int(a)) for r, a in zip(g.rows.tolist(), list(la))}
    closes = set()
    for t, in_tail, g in run.closes:
        closes |= {(int(r), int(t), bool(in_tail), int(o)) for r, o in zip(g.rows.tolist(), g.offs.tolist())}
    return inside, closes


@pytest.mark.parametrize("name", list(TEXTS))
def test_trie_walk_equals_the_column_walk_of_every_token(tok, name):
    vocab = Vocabulary.from_tokenizer(tok)
    if name == "schema":
        constraint = compile_constraint("json_schema", SCHEMA, tok)
    else:
        constraint = compile_grammar(name, vocab)
    builder, engine = constraint.masks, constraint.engine
    table = TokenTable.of(vocab)
    trie = TokenTrie.of(table)
    assert trie.n_nodes < 0.4 * int(table.lens.sum())  # shared prefixes: far fewer steps than bytes
    matcher = constraint.matcher()
    compared = set()
    for token in tok.encode(TEXTS[name], add_special_tokens=False):
        state = matcher.state
        ctx = engine.context(state.stack)
        key = (id(ctx), state.lex, len(state.tail))
        if key not in compared:
            compared.add(key)
            live = ctx.live_bytes(state.lex)
            rows = table.all_rows[live[table.flat[table.starts[table.all_rows]]]]
            columns = walk(table, ctx, state.lex, len(state.tail), rows, np.zeros(len(rows), np.int64))
            builder._classes[id(ctx)] = None  # no token grouping: the trie walk of every token
            by_trie = builder._run_all(ctx, state)
            assert _flat(by_trie) == _flat(columns), (name, key)
        matcher.advance(token)  # raises if the text leaves the grammar
    assert len(compared) >= 8


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 100, 256, 257, 5000])
def test_pack_sets_exactly_the_bits_of_its_ids(n):
    """TokenTable.pack has a word-by-word path for few ids and a flag-array path for many: both are
    numpy's packbits of the flags (repeats, bit 31 and the last token included)."""
    table = TokenTable([b"x"] * 1000)
    ids = np.random.default_rng(n).integers(0, 1000, n)
    if n >= 4:
        ids[1], ids[2], ids[3] = ids[0], 999, 31
    flags = np.zeros(table.num_words * 32, dtype=bool)
    flags[ids] = True
    packed = table.pack(ids)
    assert packed.dtype == np.int32
    assert np.array_equal(packed, np.packbits(flags, bitorder="little").view("<u4").astype(np.int32))


def _loop_reference(token_bytes, trans, counted, accepting, state):
    """LoopTokens' outcome token by token: ({(final state, counted characters): token ids}, rest)."""
    inside: dict = {}
    rest = set()
    for i, data in enumerate(token_bytes):
        q, got = state, 0
        for b in data:
            if trans[q, b] < 0:
                break
            got += int(counted[q, b]) if counted is not None else 0
            q = int(trans[q, b])
            if accepting[q]:
                rest.add(i)
                break
        else:
            inside.setdefault((q, got), []).append(i)
    return inside, rest


@pytest.mark.parametrize("seed", range(6))
def test_loop_tokens_equal_the_walk_of_every_token(seed):
    """LoopTokens steps each trie level over all its nodes while many live, else over the live
    ones: either way, the tokens that stay inside grouped by (final state, counted characters) in
    that order, and those that reach an accepting state, are those of a walk token by token."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b'ab"\\x\xc3\xa9', dtype=np.uint8)
    tokens = sorted({bytes(rng.choice(alphabet, int(rng.integers(1, 9)))) for _ in range(4000)})
    table = TokenTable(tokens)
    m = 6
    trans = rng.integers(0, m, (m, 256)).astype(np.int32)
    trans[rng.random((m, 256)) < [0.02, 0.3, 0.6][seed % 3]] = -1  # mostly alive, or dying as it goes
    counted = (rng.random((m, 256)) < 0.7) if seed < 4 else None
    accepting = np.zeros(m, dtype=bool)
    accepting[m - 1] = seed % 2 == 0  # some paths reach an accept: those tokens are walked in full
    loop = string_walk.LoopTokens(packed_steps(trans, counted), counted is not None, accepting, 0, table)
    want_inside, want_rest = _loop_reference(tokens, trans, counted, accepting, 0)
    assert set(loop.rest.tolist()) == want_rest and len(loop.rest) == len(want_rest)
    got_inside = {(final, got): sorted(loop.tokens[lo:hi].tolist()) for final, got, lo, hi in loop.groups}
    assert got_inside == want_inside
    assert [(f, g) for f, g, _, _ in loop.groups] == sorted(want_inside)  # grouped in (state, count) order
    assert sum(hi - lo for _, _, lo, hi in loop.groups) == len(loop.tokens)


def test_token_classes_group_tokens_by_their_class_sequence():
    """TokenClasses: one representative per byte-class sequence, every token of a group (empty
    tokens, which hold no bytes in the table, left out) spelling its representative's classes."""
    from sgl_runtime.constrained.grammar.token_classes import TokenClasses

    rng = np.random.default_rng(3)
    tokens = [bytes(rng.integers(0, 256, int(rng.integers(1, 6)))) for _ in range(3000)]
    tokens[::50] = [b""] * len(tokens[::50])  # empty rows between non-empty ones
    table = TokenTable(tokens)
    class_of = (np.arange(256) % 3).astype(np.int32)
    grouped = TokenClasses.build(table, class_of)
    assert grouped is not None
    seq = [tuple(class_of[list(t)].tolist()) for t in tokens]
    want: dict = {}
    for i, t in enumerate(tokens):
        if t:
            want.setdefault(seq[i], set()).add(i)
    members, counts = grouped.members(grouped.reps)
    got, at = {}, 0
    for rep, n in zip(grouped.reps.tolist(), counts.tolist()):
        got[seq[rep]] = set(members[at : at + n].tolist())
        at += n
    assert got == want


def test_token_classes_build_in_the_background_and_masks_do_not_wait(tok, monkeypatch):
    """A context's grouping is built on the background thread while its walks go on without it:
    the masks along a text equal those with no grouping at all, the build is handed over once,
    and the walks after it is done use it."""
    from sgl_runtime.constrained.grammar import token_classes
    from sgl_runtime.constrained.grammar import walk as walk_module

    started, release = [], threading.Event()
    build = token_classes.TokenClasses.build.__func__

    def slow_build(cls, table, class_of):
        started.append(class_of)
        release.wait(30)  # held until the walks below have run without it
        return build(cls, table, class_of)

    text = json.dumps({"note": "caf\u00e9 mots " * 12, "extra": {"k": "v w x y z"}}, ensure_ascii=False)
    ids = tok.encode(text.replace(", ", ",").replace(": ", ":"), add_special_tokens=False)

    def masks(constraint):
        matcher, out = constraint.matcher(), []
        for token in ids:
            out.append(matcher.bitmask().copy())
            matcher.advance(token)
        return out

    monkeypatch.setattr(walk_module, "GROUP_AFTER_RUNS", 1)
    monkeypatch.setattr(token_classes.TokenClasses, "build", classmethod(slow_build))
    grouped = compile_constraint("json_schema", SCHEMA, tok)
    try:
        while_building = masks(grouped)
        assert started  # a build was handed over ...
        pending = [f for f in grouped.masks._classes.values() if isinstance(f, Future)]
        assert pending and not any(f.done() for f in pending)  # ... and no mask waited for it
    finally:
        release.set()  # the builder thread is shared by the whole process
    for f in pending:
        f.result(timeout=60)
    for cache in (grouped._cache, grouped.masks._runs, grouped.masks._masks):
        cache.clear()  # walk again, now through the groupings
    after = masks(grouped)
    assert any(isinstance(c, token_classes.TokenClasses) for c in grouped.masks._classes.values())
    monkeypatch.setattr(walk_module, "MAX_GROUPED_CLASSES", 0)
    plain = masks(compile_constraint("json_schema", SCHEMA, tok))
    assert len(plain) == len(while_building) == len(after) > 30
    for i, (a, b, c) in enumerate(zip(plain, while_building, after)):
        assert np.array_equal(a, b) and np.array_equal(a, c), (i, tok.decode(ids[:i]))


@pytest.mark.parametrize("n", [0, 1, 5, 64, 65, 300, 5000])
def test_split_by_key_groups_positions_in_key_order(n):
    """split_by_key, by a dict for few outcomes and by a stable sort for many: each distinct key
    once, in ascending order, with its positions ascending."""
    from sgl_runtime.constrained.grammar.token_trie import split_by_key

    keys = np.random.default_rng(n).integers(-3, 40 if n < 300 else 70_000, n)
    got = [(k, part.tolist()) for k, part in split_by_key(keys)]
    want = [(k, np.flatnonzero(keys == k).tolist()) for k in sorted(set(keys.tolist()))]
    assert got == want
    assert all(isinstance(k, int) for k, _ in got)
