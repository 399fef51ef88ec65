"""Sampling parameters end to end: stops, EOS handling, n, seeds, top-k/top-p/min-p, penalties."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import checkpoint, random_prompts

from sgl_runtime.engine import Engine
from sgl_runtime.sampler import Sampler
from sgl_runtime.sampling_params import SamplingParams

N = 16
GREEDY = {"max_new_tokens": N, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine(checkpoint(tmp_path_factory, "llama3"), device="cpu", max_total_tokens=2048)


@pytest.fixture(scope="module")
def prompt():
    return random_prompts((8,), seed=21)[0]


@pytest.fixture(scope="module")
def greedy(engine, prompt):
    return engine.generate(input_ids=prompt, sampling_params=GREEDY)


def test_stop_string_is_trimmed(engine, prompt, greedy):
    tokenizer = engine.tokenizer
    stop = tokenizer.decode(greedy["output_ids"][5:7])
    full_text = greedy["text"]
    r = engine.generate(input_ids=prompt, sampling_params={**GREEDY, "stop": [stop]})
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert r["text"] == full_text[: full_text.find(stop)]
    assert r["output_ids"] == greedy["output_ids"][: len(r["output_ids"])]
    kept = engine.generate(input_ids=prompt, sampling_params={**GREEDY, "stop": stop, "no_stop_trim": True})
    assert kept["text"].endswith(stop) and kept["text"].startswith(r["text"])


def test_stop_token_ids(engine, prompt, greedy):
    target = greedy["output_ids"][4]
    r = engine.generate(input_ids=prompt, sampling_params={**GREEDY, "stop_token_ids": [target]})
    cut = greedy["output_ids"].index(target) + 1
    assert r["output_ids"] == greedy["output_ids"][:cut]
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": target}


def test_eos_ignore_eos_and_min_new_tokens(engine, prompt, greedy):
    eos = greedy["output_ids"][3]
    scheduler = engine.scheduler
    saved = scheduler.eos_token_ids
    scheduler.eos_token_ids = frozenset({eos})  # pretend the model's EOS is a token it produces
    try:
        stopped = engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": N, "temperature": 0})
        ignored = engine.generate(input_ids=prompt, sampling_params=GREEDY)
        delayed = engine.generate(
            input_ids=prompt, sampling_params={"max_new_tokens": N, "temperature": 0, "min_new_tokens": 8}
        )
    finally:
        scheduler.eos_token_ids = saved
    cut = greedy["output_ids"].index(eos) + 1
    assert stopped["output_ids"] == greedy["output_ids"][:cut]
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    assert ignored["output_ids"] == greedy["output_ids"]
    assert len(delayed["output_ids"]) >= 8 and eos not in delayed["output_ids"][:8]


def test_top_k_1_tiny_top_p_and_min_p_1_equal_greedy(engine, prompt, greedy):
    for extra in ({"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}):
        r = engine.generate(input_ids=prompt, sampling_params={**GREEDY, "temperature": 1.0, **extra})
        assert r["output_ids"] == greedy["output_ids"], extra


def test_seed_reproducible_and_n_fans_out(engine, prompt):
    params = {"max_new_tokens": 8, "temperature": 1.0, "ignore_eos": True}
    a = engine.generate(input_ids=prompt, sampling_params={**params, "seed": 5})
    b = engine.generate(
        input_ids=[prompt, random_prompts((3,), seed=9)[0]], sampling_params=[{**params, "seed": 5}, params]
    )[0]
    c = engine.generate(input_ids=prompt, sampling_params={**params, "seed": 6})
    assert a["output_ids"] == b["output_ids"]
    assert a["output_ids"] != c["output_ids"]
    samples = engine.generate(input_ids=prompt, sampling_params={**params, "n": 3, "seed": 1})
    assert isinstance(samples, list) and len(samples) == 3
    assert len({tuple(s["output_ids"]) for s in samples}) == 3
    assert all(s["meta_info"]["cached_tokens"] == len(prompt) - 1 for s in samples)
    assert all(len(s["output_ids"]) == 8 for s in samples)


class _FakeReq:
    def __init__(self, output_ids, **params):
        self.origin_input_ids = [0]
        self.output_ids = output_ids
        self.sampling_params = SamplingParams(**params)
        self.eos_token_ids = frozenset({7})
        self.matcher = None
        self.generator = None
        self.index = 0


def test_penalties_and_min_new_tokens_mask():
    logits = torch.tensor([[1.0, 2.0, -1.0, 0.5, 0.0, 0.0, 0.0, 5.0]])
    freq = _FakeReq([1, 1, 3], temperature=0, frequency_penalty=0.6, presence_penalty=0.5, min_new_tokens=4)
    out = logits.clone()
    assert Sampler()(out, [freq]).item() == 0  # 7 (EOS) masked; 1 drops to 2 - 1.2 - 0.5
    assert out[0, 1].item() == pytest.approx(0.3, abs=1e-6)
    assert out[0, 3].item() == pytest.approx(-0.6, abs=1e-6)  # 0.5 - 0.6 - 0.5
    assert out[0, 7].item() == float("-inf")
    rep = _FakeReq([1, 2], temperature=0, repetition_penalty=2.0)
    out = logits.clone()
    Sampler()(out, [rep])
    assert out[0, :3].tolist() == pytest.approx([0.5, 1.0, -2.0])  # prompt token 0 too


def test_top_k_restricts_the_support():
    logits = torch.tensor([[3.0, 2.9, 2.8, 0.0, -1.0]]).repeat(64, 1)
    reqs = [_FakeReq([], temperature=1.0, top_k=2) for _ in range(64)]
    drawn = set(Sampler()(logits.clone(), reqs).tolist())
    assert drawn == {0, 1}


def _empirical(logits_row: list[float], n: int, **params) -> torch.Tensor:
    logits = torch.tensor([logits_row]).repeat(n, 1)
    reqs = [_FakeReq([], **params) for _ in range(n)]
    drawn = Sampler()(logits, reqs)
    return torch.bincount(drawn, minlength=len(logits_row)).float() / n


def _truncated(probs: torch.Tensor, keep: list[int]) -> torch.Tensor:
    out = torch.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def test_top_p_top_k_min_p_sample_the_exact_truncated_distribution():
    torch.manual_seed(0)
    row = [2.0, 1.5, 1.0, 0.5, 0.0, -1.0]
    probs = torch.softmax(torch.tensor(row), -1)  # 0.42, 0.25, 0.15, 0.09, 0.06, 0.02
    n = 20000
    # top_p 0.7: mass above token 2 is 0.67 < 0.7 (kept), above token 3 is 0.83 (dropped).
    assert torch.allclose(_empirical(row, n, top_p=0.7), _truncated(probs, [0, 1, 2]), atol=0.015)
    assert torch.allclose(_empirical(row, n, top_k=2), _truncated(probs, [0, 1]), atol=0.015)
    assert torch.allclose(_empirical(row, n, min_p=0.3), _truncated(probs, [0, 1, 2]), atol=0.015)
    assert torch.allclose(_empirical(row, n, top_p=0.9, top_k=3), _truncated(probs, [0, 1, 2]), atol=0.015)
    assert torch.allclose(_empirical(row, n), probs, atol=0.015)


def test_constraint_masks_match_the_torch_reference():
    """apply_constraints_ (one stacked buffer, numpy unpacking on CPU) masks exactly what the plain torch
    unpacking does: full batches, unconstrained rows (all allowed) and masks narrower than the logits."""
    import numpy as np

    from sgl_runtime.constrained.bitmask import apply_token_bitmask_torch_
    from sgl_runtime.sampler import MaskStaging, apply_constraints_

    class FixedMatcher:
        def __init__(self, mask):
            self.mask = mask

        def bitmask(self):
            return self.mask

    class R:
        def __init__(self, matcher):
            self.matcher = matcher

    rng = np.random.default_rng(0)
    vocab, words = 100, 4  # 128 bits for 100 logits
    staging = MaskStaging()
    for layout in ([True] * 5, [True, False, True, False, False], [False, True]):
        masks = [rng.integers(-(2**31), 2**31, size=words, dtype=np.int64).astype(np.int32) for _ in layout]
        if layout[0] and not all(layout):
            masks[0] = masks[0][:2]  # a narrower mask: ids past 64 banned
        reqs = [R(FixedMatcher(m) if c else None) for m, c in zip(masks, layout)]
        logits = torch.randn(len(layout), vocab)
        expected = logits.clone()
        full = np.full((len(layout), words), -1, dtype=np.int32)
        for i, (m, c) in enumerate(zip(masks, layout)):
            if c:
                full[i] = 0
                full[i, : len(m)] = m
        apply_token_bitmask_torch_(expected, torch.from_numpy(full))
        apply_constraints_(logits, reqs, staging)
        assert torch.equal(logits, expected)
