"""Walks from inside one terminal read off a table (grammar/string_walk.py) against the trie walk
of every token: the same tokens end inside the terminal in the same lexer states, and the same
tokens close it with the same types and ends, from every lexer state reached along Qwen2.5
tokenizations of JSON texts: long strings of bounded length (counted slots, near and far from
their bounds: an 88-character item under a maxLength of 90), unbounded strings, strings with a pattern, and a lark grammar's string terminal.
The masks of whole texts are bit-identical with the table and without it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgl_runtime.constrained.compiler import compile_constraint
from sgl_runtime.constrained.grammar import string_walk
from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.token_trie import TokenTrie, walk_trie
from sgl_runtime.constrained.grammar.walk import TokenTable, _grouped
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "maxLength": 400},
        "short": {"type": "string", "minLength": 3, "maxLength": 12},
        "free": {"type": "string"},
        "arn": {"type": "string", "pattern": "^arn:[a-z0-9-]+:[A-Za-z0-9 ./_-]{0,200}$"},
        "many": {"type": "array", "items": {"type": "string", "minLength": 40, "maxLength": 90}},
    },
    "additionalProperties": {"type": "string", "maxLength": 64},
}
TEXTS = {
    "schema": json.dumps(
        {
            "note": 'caf\u00e9 "quoted" \\ back\\slash \u4e2d\u6587 ' * 6,
            "short": "abc\u00e9d",
            "free": "x\\u00e9y\\n and more text, with commas: [1, 2]",
            "arn": "arn:aws-cn:s3 bucket/key_name.txt",
            "many": [
                "a" * 45,
                "The quick brown fox jumps over the lazy dog; the five boxing wizards jump quickly, twice!",
            ],
            "extra key": "value that is short",
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ),
    "json": '{"a": ["a long string with \\"escapes\\" and \u00e9\u00e8 in it", -2.5e3], "b": "\u4e2d\u6587 text"}',
}


@pytest.fixture(scope="module")
def tok():
    return load_qwen2_tokenizer()


def _constraint(name: str, tok, vocab):
    return compile_constraint("json_schema", SCHEMA, tok) if name == "schema" else compile_grammar("json", vocab)


def _flat(run) -> tuple:
    """A run's outcomes as sets: (token, final state), (token, type, in tail, offset)."""
    inside = {(int(r), int(s)) for s, g in run.inside for r in g.rows.tolist()}
    closes = set()
    for t, in_tail, g in run.closes:
        closes |= {(int(r), int(t), bool(in_tail), int(o)) for r, o in zip(g.rows.tolist(), g.offs.tolist())}
    return inside, closes


@pytest.mark.parametrize("name", list(TEXTS))
def test_table_walk_equals_the_trie_walk(tok, name):
    vocab = Vocabulary.from_tokenizer(tok)
    constraint = _constraint(name, tok, vocab)
    builder, engine = constraint.masks, constraint.engine
    table = TokenTable.of(vocab)
    trie = TokenTrie.of(table)
    matcher = constraint.matcher()
    compared, counted = set(), 0
    for token in tok.encode(TEXTS[name], add_special_tokens=False):
        state = builder.canonical(matcher.state)
        ctx = engine.context(state.stack)
        loop = string_walk.loop_tokens(ctx, state.lex, table)
        key = (id(ctx), state.lex, len(state.tail))
        if loop is not None and key not in compared:
            compared.add(key)
            counted += type(ctx.slots[ctx.alive_slots(state.lex)[0]]).__name__ == "CountedSlot"
            by_table = builder._run_inside(ctx, state, loop)
            inside, closes = walk_trie(trie, ctx, state.lex, len(state.tail), ctx.live_bytes(state.lex))
            by_trie = _grouped(inside, closes, ctx, trie.sorted_rows, trie.offsets, table)
            assert _flat(by_table) == _flat(by_trie), (name, key)
        matcher.advance(token)  # raises if the text leaves the grammar
    assert len(compared) >= (10 if name == "schema" else 3)
    if name == "schema":
        assert counted >= 5  # long strings at several counts, not only plain ones


@pytest.mark.parametrize("name", list(TEXTS))
def test_masks_are_the_same_without_the_table(tok, name, monkeypatch):
    vocab = Vocabulary.from_tokenizer(tok)
    ids = tok.encode(TEXTS[name], add_special_tokens=False)
    masks = []
    for use_table in (True, False):
        if not use_table:
            monkeypatch.setattr(string_walk, "loop_tokens", lambda ctx, lex, table: None)
        constraint = _constraint(name, tok, vocab)
        matcher = constraint.matcher()
        out = []
        for token in ids:
            out.append(constraint.masks.mask(matcher.state))
            assert out[-1][token // 32] >> (token % 32) & 1, "the text's own token must be allowed"
            matcher.advance(token)
        masks.append(np.stack(out))
    assert np.array_equal(masks[0], masks[1])


def test_an_automaton_collected_while_its_walks_are_looked_up_does_not_deadlock():
    """LoopTokens forgets a collected automaton from a weakref callback, which may run on the thread
    that holds LoopTokens' lock (a collection started by an allocation inside `of`): the callback
    must not take that lock, or the thread waits for itself forever. `of` drops the entry later."""
    import threading
    import weakref

    from sgl_runtime.constrained.grammar.slots import SlotDFA

    def slot() -> SlotDFA:
        trans = np.full((2, 256), -1, dtype=np.int32)
        trans[0, ord("a")] = trans[1, ord("a")] = 1
        return SlotDFA(trans, np.array([-1, 0], dtype=np.int32), np.array([True, True]), 0)

    table = TokenTable([b"a", b"aa", b"b"])
    gone = slot()
    string_walk.LoopTokens.of(gone, (gone.trans, None, gone.label >= 0), 0, table)
    key = id(gone)
    assert key in string_walk.LoopTokens._digests
    ref = weakref.ref(gone)

    def collect_under_the_lock() -> None:
        nonlocal gone
        with string_walk.LoopTokens._lock:
            gone = None  # the callback runs here, on this thread, the lock held

    worker = threading.Thread(target=collect_under_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the weakref callback waited for the lock its own thread holds"
    assert ref() is None
    other = slot()
    loop = string_walk.LoopTokens.of(other, (other.trans, None, other.label >= 0), 0, table)
    assert sorted(loop.rest.tolist()) == [0, 1] and not loop.tokens.size  # "a", "aa" reach the accept; "b" dies
    assert key not in string_walk.LoopTokens._digests or string_walk.LoopTokens._digests[key][0]() is other
