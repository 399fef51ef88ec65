"""The memo of automaton operations (automata_memo.py): equal operands give the result computed
the first time, and a hit charges the work budget what the first computation charged, so a
schema's verdict never depends on what the process compiled before."""

import pickle

import pytest

from sgl_runtime.constrained import automata_memo
from sgl_runtime.constrained.automata import BUDGET_EXCEEDED, char_dfa, charset, literal, work_budget, work_left
from sgl_runtime.constrained.automata_ops import concat, intersect, repeat, union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_automaton import regex_to_dfa


def _operands():
    words = union(*(literal(w) for w in ("alpha", "beta", "gamma", "delta")))
    return repeat(words, 1, 6, sep=literal(",")), regex_to_dfa(r"[a-z,]*(ta|ma),[a-z]+")


def _used(fn) -> tuple:
    with work_budget(10**6):
        result = fn()
        left, total = work_left()
    return result, total - left


def test_a_hit_is_the_first_result_and_charges_the_same():
    automata_memo.clear()
    a, b = _operands()
    first, cold = _used(lambda: intersect(a, b))
    a2, b2 = _operands()  # equal operands, other objects
    again, warm = _used(lambda: intersect(a2, b2))
    assert again is first
    assert cold > 0 and warm == cold
    automata_memo.clear()
    recomputed, _ = _used(lambda: intersect(a, b))
    assert recomputed == first and recomputed is not first


def test_a_budget_refusal_does_not_depend_on_the_memo():
    a, b = _operands()
    automata_memo.clear()
    _, cost = _used(lambda: concat(intersect(a, b), literal("!")))
    for warm in (False, True):
        if not warm:
            automata_memo.clear()
        with pytest.raises(ConstraintError, match=BUDGET_EXCEEDED):
            with work_budget(cost - 1):
                concat(intersect(a, b), literal("!"))
        with work_budget(cost):
            concat(intersect(a, b), literal("!"))


def test_results_match_the_operations_without_the_memo():
    a, b = _operands()
    automata_memo.clear()
    for fn in (lambda: union(a, b), lambda: intersect(a, b), lambda: concat(a, literal(";"), b)):
        warm = fn()
        automata_memo.clear()
        cold = fn()
        assert warm == cold
        for text in ("alpha", "beta,gamma", "beta,delta,ma,x", "gamma;beta,ma,zz", ""):
            assert warm.accepts(text) == cold.accepts(text)


def test_a_pickled_dfa_leaves_its_cached_hash_behind():
    """String hashes differ between processes (compile workers pickle their automata)."""
    dfa = union(literal("x"), char_dfa(charset("yz")))
    hash(dfa)
    copy = pickle.loads(pickle.dumps(dfa))
    assert "_hash" not in copy.__dict__ and copy == dfa and hash(copy) == hash(dfa)


def test_the_memo_stays_within_its_bound(monkeypatch):
    """Kept results weigh at most MEMO_WEIGHT (states, and listed characters of large classes),
    the least recently used going first; a result heavier than MEMO_MAX_RESULT is not kept."""
    monkeypatch.setattr(automata_memo, "MEMO_WEIGHT", 40)
    monkeypatch.setattr(automata_memo, "MEMO_MAX_RESULT", 30)
    automata_memo.clear()
    for i in range(20):
        union(literal(f"a{i}"), literal(f"b{i}x"))  # a few states and characters each
        assert automata_memo._kept[0] <= 40
    kept = [operands for _, operands in automata_memo._entries]
    assert (literal("a19"), literal("b19x")) in kept and (literal("a0"), literal("b0x")) not in kept
    assert union(literal("a19"), literal("b19x")) is union(literal("a19"), literal("b19x"))
    big = char_dfa(charset(chr(0x4E00 + i) for i in range(100)))  # 100 listed characters: over 30
    concat(big, literal("!"))
    assert concat(big, literal("!")) is not concat(big, literal("!"))
    automata_memo.clear()
