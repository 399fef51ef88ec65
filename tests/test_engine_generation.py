"""Engine generation is exact: greedy output equals transformers', under memory pressure too, with prefix reuse."""

from __future__ import annotations

import pytest
from engine_fixtures import checkpoint, hf_greedy, random_prompts

from sgl_runtime.engine import Engine

GREEDY = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
LENGTHS = (3, 17, 9, 30, 1, 24)


@pytest.fixture(scope="module", params=["llama3", "qwen3"])
def model_path(request, tmp_path_factory):
    return checkpoint(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def engine(model_path):
    return Engine(model_path, device="cpu", max_total_tokens=2048)


@pytest.fixture()
def fresh_engine(engine):
    assert engine.flush_cache()
    return engine


@pytest.fixture(scope="module")
def reference(model_path):
    prompts = random_prompts(LENGTHS, seed=1)
    return prompts, [hf_greedy(model_path, p, GREEDY["max_new_tokens"]) for p in prompts]


def test_greedy_batch_matches_transformers(fresh_engine, reference):
    prompts, expected = reference
    results = fresh_engine.generate(input_ids=prompts, sampling_params=GREEDY)
    assert [r["output_ids"] for r in results] == expected
    for prompt, r in zip(prompts, results):
        meta = r["meta_info"]
        assert meta["prompt_tokens"] == len(prompt)
        assert meta["completion_tokens"] == GREEDY["max_new_tokens"]
        assert meta["finish_reason"] == {"type": "length", "length": GREEDY["max_new_tokens"]}
        assert meta["forward_passes"] == GREEDY["max_new_tokens"]


def test_small_pool_evicts_chunks_and_retracts_with_identical_output(model_path):
    prompts = random_prompts((3, 9, 5, 12, 1, 7), seed=2)
    params = {**GREEDY, "max_new_tokens": 20}
    expected = [hf_greedy(model_path, p, 20) for p in prompts]
    # 6 requests need 37 prompt + 120 output tokens; the pool holds 48, prefill chunks are 4 tokens, and a
    # low conservativeness reserves too little for running requests' outputs, so decode must retract.
    engine = Engine(
        model_path,
        device="cpu",
        max_total_tokens=48,
        chunked_prefill_size=4,
        max_prefill_tokens=8,
        schedule_conservativeness=0.3,
    )
    scheduler = engine.scheduler
    results = engine.generate(input_ids=prompts, sampling_params=params)
    assert [r["output_ids"] for r in results] == expected
    assert scheduler.metrics.num_retractions > 0
    # Run again: now the cache holds earlier sequences that must be evicted to make room.
    again = engine.generate(input_ids=prompts[::-1], sampling_params=params)
    assert [r["output_ids"] for r in again] == expected[::-1]
    scheduler.tree_cache.check_integrity()
    assert scheduler.kv_available_size() + scheduler.tree_cache.evictable_size() == scheduler.max_total_num_tokens
    assert engine.flush_cache()
    assert scheduler.kv_available_size() == scheduler.max_total_num_tokens


def test_shared_prefix_reports_cached_tokens(model_path, fresh_engine):
    engine = fresh_engine
    base, tail_a, tail_b = random_prompts((40, 5, 7), seed=7)
    first = engine.generate(input_ids=base + tail_a, sampling_params=GREEDY)
    assert first["meta_info"]["cached_tokens"] == 0
    second = engine.generate(input_ids=base + tail_b, sampling_params=GREEDY)
    assert second["meta_info"]["cached_tokens"] == len(base)
    assert second["output_ids"] == hf_greedy(model_path, base + tail_b, GREEDY["max_new_tokens"])
    # The same prompt again reuses all but its last token (whose logits are needed to sample).
    third = engine.generate(input_ids=base + tail_b, sampling_params=GREEDY)
    assert third["meta_info"]["cached_tokens"] == len(base) + len(tail_b) - 1
    assert third["output_ids"] == second["output_ids"]


def test_max_new_tokens_zero_only_caches_the_prompt(fresh_engine):
    engine = fresh_engine
    (prompt,) = random_prompts((20,), seed=3)
    r = engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": 0})
    assert r["output_ids"] == [] and r["text"] == ""
    assert r["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    follow = engine.generate(input_ids=prompt + [5, 6], sampling_params=GREEDY)
    assert follow["meta_info"]["cached_tokens"] == len(prompt)


def test_radix_cache_disabled_gives_same_output(model_path, reference):
    prompts, expected = reference
    engine = Engine(model_path, device="cpu", max_total_tokens=96, disable_radix_cache=True, chunked_prefill_size=16)
    results = engine.generate(input_ids=prompts, sampling_params=GREEDY)
    assert [r["output_ids"] for r in results] == expected
    assert engine.scheduler.kv_available_size() == engine.scheduler.max_total_num_tokens


@pytest.mark.parametrize("chunk", [None, 16])
def test_requests_submitted_together_share_their_prefix(model_path, chunk):
    """The first request of a group prefills the shared prefix; the others, deferred one round, find it
    cached (unfinished requests enter the radix tree right after their prefill), with exact outputs."""
    shared, *tails = random_prompts((48, 3, 5, 4, 6, 2), seed=11)
    prompts = [shared + t for t in tails]
    engine = Engine(
        model_path, device="cpu", max_total_tokens=1024, chunked_prefill_size=-1 if chunk is None else chunk
    )
    scheduler = engine.scheduler
    results = engine.generate(input_ids=prompts, sampling_params=GREEDY)
    cached = sorted(r["meta_info"]["cached_tokens"] for r in results)
    assert cached[0] == 0 and all(c >= len(shared) for c in cached[1:]), cached
    for prompt, r in list(zip(prompts, results))[:2]:
        assert r["output_ids"] == hf_greedy(model_path, prompt, GREEDY["max_new_tokens"])
    alone = Engine(model_path, device="cpu", max_total_tokens=1024, disable_radix_cache=True)
    assert [r["output_ids"] for r in results] == [
        r["output_ids"] for r in alone.generate(input_ids=prompts, sampling_params=GREEDY)
    ]
    scheduler.tree_cache.check_integrity()
    assert scheduler.tree_cache.protected_size() == 0
    assert scheduler.kv_available_size() + scheduler.tree_cache.evictable_size() == scheduler.max_total_num_tokens
    assert engine.flush_cache()
    assert scheduler.kv_available_size() == scheduler.max_total_num_tokens
