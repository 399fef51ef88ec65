"""The short cuts that make a JSON Schema's grammar form quick to build, each against the long way:
ASCII Dfas read straight into byte tables (against the UTF-8 expansion), byte classes found by
hashing columns (against numpy's exact unique), and a lexer context's rows built all at once
(against building each row on its own)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tiny_vocab import make_vocab

from sgl_runtime.constrained import byte_dfa as byte_dfa_module
from sgl_runtime.constrained.automata import Dfa, charset, literal, to_interegular
from sgl_runtime.constrained.automata_ops import Nfa, concat, repeat, union
from sgl_runtime.constrained.byte_dfa import ByteDFA, byte_classes
from sgl_runtime.constrained.grammar.lexer import LexerContext
from sgl_runtime.constrained.json_schema.language import schema_to_grammar


def same_language(a: ByteDFA, b: ByteDFA) -> bool:
    """Product walk over every byte from both starts: no reachable pair disagrees on acceptance."""
    seen, todo = {(a.initial, b.initial)}, [(a.initial, b.initial)]
    while todo:
        x, y = todo.pop()
        if (x >= 0 and a.accepting[x]) != (y >= 0 and b.accepting[y]):
            return False
        rx = a.transitions[x] if x >= 0 else np.full(256, -1)
        ry = b.transitions[y] if y >= 0 else np.full(256, -1)
        for pair in set(zip(rx.tolist(), ry.tolist())):
            if pair != (-1, -1) and pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return True


def random_ascii_dfa(rng: random.Random) -> Dfa:
    words = ["".join(rng.choice('ab"{},: ') for _ in range(rng.randrange(1, 6))) for _ in range(rng.randrange(1, 5))]
    parts = [union(*(literal(w) for w in words))]
    if rng.random() < 0.5:
        parts.append(repeat(Dfa((((charset(" \n\t"), 1),), ()), frozenset({1})), 0, None))
    if rng.random() < 0.5:
        parts.append(literal(rng.choice([":", ",", '"k":'])))
    return concat(*parts)


def test_ascii_dfas_read_straight_into_tables_equal_the_utf8_expansion():
    rng = random.Random(0)
    for _ in range(60):
        dfa = random_ascii_dfa(rng)
        direct = ByteDFA.from_dfa(dfa)
        expanded = ByteDFA.from_fsm(to_interegular(dfa))
        assert same_language(direct, expanded)
        assert direct.n_states == expanded.n_states  # both minimal
        assert direct._pruned().n_states == direct.n_states  # every state reachable and live


def test_from_dfa_shares_read_only_tables_and_expands_what_is_not_ascii():
    dfa = concat(literal('"caf'), literal("é"), literal('":'))
    first = ByteDFA.from_dfa(dfa)
    assert ByteDFA.from_dfa(concat(literal('"caf'), literal("é"), literal('":'))) is first  # equal Dfas, one table
    assert first.accepts('"café":') and not first.accepts('"cafe":')
    with pytest.raises(ValueError):
        first.transitions[0, 0] = 1
    negated = Dfa((((~charset('"'), 0), (charset('"'), 1)), ()), frozenset({1}))
    assert ByteDFA.from_dfa(negated).accepts('ü"') and not ByteDFA.from_dfa(negated).accepts('"x')


def test_from_dfa_prunes_states_that_cannot_accept():
    # state 2 is a dead end reached on "b": the table must not keep it (lexer slots assume every state live)
    dfa = Dfa((((charset("a"), 1), (charset("b"), 2)), (), ()), frozenset({1}))
    table = ByteDFA.from_dfa(dfa)
    assert table.n_states == 2 and table.accepts("a") and table.live_bytes(table.initial).tolist() == [ord("a")]


def _partition(class_of: np.ndarray) -> set:
    return {frozenset(np.flatnonzero(class_of == c).tolist()) for c in np.unique(class_of)}


@pytest.mark.parametrize("weak_hash", [False, True])
def test_byte_classes_equal_numpy_unique_columns(monkeypatch, weak_hash):
    if weak_hash:  # every weight 1: a column's signature is its sum, so unequal columns collide
        monkeypatch.setattr(
            byte_dfa_module.np.random,
            "default_rng",
            lambda seed: type("R", (), {"integers": lambda self, lo, hi, size, dtype: np.zeros(size, dtype)})(),
        )
    rng = np.random.default_rng(5) if not weak_hash else np.random.Generator(np.random.PCG64(5))
    for _ in range(20):
        distinct = rng.integers(-1, 4, size=(int(rng.integers(2, 9)), int(rng.integers(2, 12))))
        table = distinct[:, rng.integers(0, distinct.shape[1], size=256)].astype(np.int32)
        if weak_hash:
            table[:, 0], table[:, 1] = [1, 0] + [0] * (len(table) - 2), [0, 1] + [0] * (len(table) - 2)
        reps, class_of = byte_classes(table)
        _, exact = np.unique(table, axis=1, return_inverse=True)
        assert _partition(class_of) == _partition(exact.reshape(-1))
        assert np.array_equal(table[:, reps[class_of]], table)  # each byte's class representative is alike


SCHEMAS = [
    {"type": "object", "properties": {"alpha": {"type": "integer"}, "beta": {"enum": ["x", 1]}, "gamma": {}}},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "boolean"}, "name": {}}}},
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": ["integer", "null", "string"]}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_lexer_rows_built_at_once_equal_rows_built_one_by_one(schema):
    vocab = make_vocab(["a", "b", '"', "{", "}", ":", ","])
    engine = schema_to_grammar(schema).constraint(vocab, warmup_s=0).engine
    contexts = engine.build_contexts(float("inf"))
    assert len(contexts) >= 3
    for ctx in contexts:
        fresh = LexerContext(ctx.slots)  # rows built at once at construction
        count = fresh.n_states
        for x in range(count):
            nxt, code, ctype = fresh._class_row(fresh._keys[x])  # the same row, on its own
            assert np.array_equal(nxt, fresh.nxt[x]) and np.array_equal(code, fresh.code[x])
            assert np.array_equal(ctype, fresh.ctype[x])
            assert fresh.rows[x] == (code.tolist(), nxt.tolist(), ctype.tolist())
        assert fresh.n_states == count  # nothing new: every state reachable was built


def _concat_through_nfa(*dfas: Dfa) -> Dfa:
    nfa, start, finals = Nfa(), None, []
    for d in dfas:
        s, fs = nfa.embed(d)
        for f in finals:
            nfa.add_eps(f, s)
        start, finals = s if start is None else start, fs
    nfa.finals.update(finals)
    return nfa.determinize(start)


def test_concatenated_literals_are_one_chain_equal_to_the_subset_construction():
    rng = random.Random(2)
    for _ in range(40):
        parts = [literal("".join(rng.choice('ab",:é') for _ in range(rng.randrange(0, 4)))) for _ in range(3)]
        assert concat(*parts) == _concat_through_nfa(*parts)
    mixed = [literal(","), repeat(literal(" "), 0, None), literal(":")]  # not all literals: the general path
    assert concat(*mixed) == _concat_through_nfa(*mixed)
