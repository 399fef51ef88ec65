"""Device mask tables (constrained/device_table.py) against the host masks and host DFA walks: random
walks of compiled regex, choices and JSON-Schema constraints, under budgets small enough to evict."""

from __future__ import annotations

import gc
import json
import random

import numpy as np
import pytest
import torch

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.constraint import FINISHED
from sgl_runtime.constrained.device_table import NO_TRANSITION, DeviceMaskTable
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer
from sgl_runtime.sampler import MaskStaging, apply_constraints_

EOS = 151645
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "n": {"type": "integer"}, "ok": {"type": "boolean"}},
    "required": ["name", "n", "ok"],
    "additionalProperties": False,
}
SPECS = [
    ("regex", r"(yes|no) [0-9]{1,3}\.[a-z]{2,5}"),
    ("choices", ["alpha", "beta", "gamma delta"]),
    ("json_schema", json.dumps(SCHEMA)),
]


@pytest.fixture(scope="module")
def tok():
    return load_qwen2_tokenizer()


@pytest.fixture(scope="module")
def constraints(tok):
    return [compile_constraint(kind, spec, tok, vocab_size=151936, eos_token_ids=[EOS]) for kind, spec in SPECS]


def _allowed_ids(mask: np.ndarray, vocab: int) -> np.ndarray:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab]
    return np.nonzero(bits)[0]


def _walk(constraint, rng: random.Random, steps: int):
    """(matcher copy, token chosen there) along one random walk to EOS."""
    matcher = constraint.matcher()
    for _ in range(steps):
        allowed = _allowed_ids(matcher.bitmask(), constraint.vocabulary.size)
        token = int(rng.choice(allowed))
        yield matcher.copy(), token
        matcher.advance(token)
        if matcher.finished:
            yield matcher.copy(), EOS
            return


@pytest.mark.parametrize("budget_rows", [4, 4096])
def test_gathered_rows_and_device_steps_equal_the_host(constraints, budget_rows):
    width = 151936 // 32
    table = DeviceMaskTable("cpu", width, budget_rows * 4 * width, transition_budget_bytes=4 * 4 * 151936)
    rng = random.Random(0)
    for constraint in constraints:
        for _ in range(3):
            for matcher, token in _walk(constraint, rng, 80):
                state = matcher.table_state()
                (slot,) = table.slots([constraint], [state])
                assert np.array_equal(table.gather([slot])[0].numpy(), matcher.bitmask())
                (nxt,) = table.next_states(constraint, [state], torch.tensor([token])).tolist()
                if matcher.finished or token == EOS:
                    assert nxt == FINISHED
                else:
                    matcher.advance(token)
                    assert nxt == matcher.state
    assert table.num_cached_states() <= budget_rows
    assert table.first_visits > (budget_rows if budget_rows == 4 else 0)


def test_disallowed_tokens_have_no_transition(constraints):
    regex = constraints[0]
    table = DeviceMaskTable("cpu", 151936 // 32, 1 << 20, transition_budget_bytes=1 << 22)
    start = regex.dfa.initial
    yes = regex.vocabulary.token_bytes.index(b"yes")
    nxt = table.next_states(regex, [start, start, start], torch.tensor([yes, EOS, 10**7])).tolist()
    assert nxt[0] >= 0 and nxt[1:] == [NO_TRANSITION, NO_TRANSITION]


def test_full_table_leaves_rows_to_the_host_and_constraint_death_frees_slots(tok):
    a = compile_constraint("regex", "[a-c]{3}", tok, vocab_size=151936, eos_token_ids=[EOS])
    table = DeviceMaskTable("cpu", 151936 // 32, 2 * 4 * (151936 // 32))  # two rows
    m = a.matcher()
    states = [m.state]
    m.advance(a.vocabulary.token_bytes.index(b"a"))
    states.append(m.state)
    m.advance(a.vocabulary.token_bytes.index(b"b"))
    states.append(m.state)
    assert table.slots([a] * 3, states)[2] is None  # the third distinct state of one batch finds no slot
    assert table.num_cached_states() == 2
    del a, m
    gc.collect()
    table.slots([], [])
    assert table.num_cached_states() == 0


def test_apply_constraints_with_table_equals_host_masks(constraints):
    """The sampler's masking with a device table (all rows on it, and mixed with unconstrained and
    budget-restricted rows) masks exactly what the host path does."""
    rng = random.Random(1)

    class R:
        def __init__(self, matcher):
            self.matcher = matcher

    matchers = [m for c in constraints for m, _ in list(_walk(c, rng, 30))[::3]]
    budgeted = constraints[2].matcher()
    budgeted.set_token_budget(3)
    for reqs in (
        [R(m) for m in matchers],
        [R(None)] + [R(m) for m in matchers[:5]] + [R(budgeted)],
    ):
        logits = torch.randn(len(reqs), 151936)
        expected = logits.clone()
        apply_constraints_(expected, reqs, MaskStaging())
        table = DeviceMaskTable("cpu", 151936 // 32, 1 << 24)
        apply_constraints_(logits, reqs, MaskStaging(), table)
        assert torch.equal(logits, expected)


def test_mask_workers_build_grammar_and_first_visit_masks_off_thread(tok, constraints):
    """MaskWorkers.prefetch builds the host masks on worker threads (grammar states; DFA states not
    yet in their index); afterwards the cursors' masks are cache hits equal to those built in place."""
    import threading

    from sgl_runtime.constrained.mask_workers import MaskWorkers

    grammar = compile_constraint("grammar", "json", tok, vocab_size=151936, eos_token_ids=[EOS], warmup_s=0)
    cursors = [m for m, _ in _walk(grammar, random.Random(4), 6)]
    expected = [c.bitmask().copy() for c in cursors]
    grammar._cache.clear()
    regex = compile_constraint("regex", "[0-9]{3}x", tok, vocab_size=151936, eos_token_ids=[EOS])
    dfa_cursor = regex.matcher()
    threads = []
    real = grammar.masks.mask

    def recording(state):
        threads.append(threading.current_thread().name)
        return real(state)

    grammar.masks.mask = recording
    workers = MaskWorkers()
    workers.prefetch(cursors + [None, dfa_cursor])
    workers.wait()
    assert workers.prefetched == len(cursors) + 1
    assert threads and all(name.startswith("mask-worker") for name in threads)
    assert regex.index.is_cached(dfa_cursor.state)
    calls = len(threads)
    for cursor, mask in zip(cursors, expected):
        assert np.array_equal(cursor.bitmask(), mask)
    assert len(threads) == calls  # all cache hits
    workers.shutdown()


@pytest.mark.gpu
def test_cuda_table_matches_the_host_and_steady_steps_do_not_sync(constraints):
    """On CUDA: gathered rows and device next states equal the host's along random walks, and once
    every state was visited the sampler's masking of a constrained batch never syncs the stream."""
    from sgl_runtime.sampler import Sampler

    width = 151936 // 32
    table = DeviceMaskTable("cuda", width, 64 << 20, transition_budget_bytes=64 * 4 * 151936)
    rng = random.Random(5)
    walked = []
    for constraint in constraints:
        for matcher, token in _walk(constraint, rng, 60):
            state = matcher.table_state()
            (slot,) = table.slots([constraint], [state])
            assert np.array_equal(table.gather([slot])[0].cpu().numpy(), matcher.bitmask())
            (nxt,) = table.next_states(constraint, [state], torch.tensor([token], device="cuda")).tolist()
            assert nxt == (
                FINISHED
                if matcher.finished or token == EOS
                else constraint.dfa.walk(matcher.state, constraint.vocabulary.token_bytes[token])
            )
            walked.append(matcher)

    from sgl_runtime.sampling_params import SamplingParams
    from sgl_runtime.scheduler.req import Req

    reqs = []
    for i, matcher in enumerate(walked[:: max(1, len(walked) // 64)]):
        reqs.append(Req(f"r{i}", [1, 2], SamplingParams(temperature=0, max_new_tokens=8)))
        reqs[-1].matcher = matcher
    sampler = Sampler()
    logits = torch.randn(len(reqs), 151936, device="cuda")
    expected = logits.clone()
    apply_constraints_(expected, reqs, MaskStaging())  # the host path
    sampler(logits.clone(), reqs)  # first visits
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tokens = sampler(logits.clone(), reqs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(tokens, expected.argmax(dim=-1))
