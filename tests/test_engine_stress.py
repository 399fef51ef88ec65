"""A seeded random mix of requests on a tiny KV pool: everything finishes, greedy outputs stay exact,
and the pools and the radix cache are consistent afterwards."""

from __future__ import annotations

import random

import pytest
from engine_fixtures import checkpoint, random_prompts

from sgl_runtime.engine import Engine
from sgl_runtime.io_struct import AbortReq, TokenizedGenerateReqInput
from sgl_runtime.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    path = checkpoint(tmp_path_factory, "qwen3")
    small = Engine(
        path,
        device="cpu",
        max_total_tokens=80,
        chunked_prefill_size=6,
        max_prefill_tokens=12,
        schedule_conservativeness=0.2,
        max_running_requests=5,
    )
    return Engine(path, device="cpu", max_total_tokens=4096), small


def _random_params(rng: random.Random) -> dict:
    params = {"max_new_tokens": rng.randint(0, 14), "ignore_eos": True}
    kind = rng.choice(["greedy", "greedy", "sampled", "regex", "n"])
    if kind == "greedy":
        params["temperature"] = 0
    elif kind == "sampled":
        params.update(temperature=1.0, top_p=rng.choice([1.0, 0.8]), top_k=rng.choice([-1, 20]), seed=rng.randint(0, 9))
    elif kind == "regex":
        params.update(regex=r"[a-c]{2,6}(x|yz)", temperature=1.0, seed=rng.randint(0, 9))
    else:
        params.update(n=2, temperature=1.0, seed=rng.randint(0, 9))
    return params


def test_random_mix_on_a_tiny_pool(engines):
    big, small = engines
    rng = random.Random(5)
    shared = random_prompts((10,), seed=60)[0]
    prompts = [
        (shared if rng.random() < 0.5 else []) + p
        for p in random_prompts([rng.randint(1, 14) for _ in range(14)], seed=61)
    ]
    params = [_random_params(rng) for _ in prompts]
    logprob_args = dict(return_logprob=True, logprob_start_len=0)
    expected = big.generate(input_ids=prompts, sampling_params=params, **logprob_args)
    got = small.generate(input_ids=prompts, sampling_params=params, **logprob_args)
    assert len(got) == len(expected)
    for p, e, g in zip([q for q in params for _ in range(q.get("n", 1))], expected, got):
        assert g["meta_info"]["finish_reason"] == e["meta_info"]["finish_reason"]
        if p.get("temperature") == 0:
            assert g["output_ids"] == e["output_ids"]
        for (lp_g, id_g, _), (lp_e, id_e, _) in zip(
            g["meta_info"]["input_token_logprobs"], e["meta_info"]["input_token_logprobs"]
        ):
            assert id_g == id_e and (lp_g is None) == (lp_e is None)
            assert lp_g is None or abs(lp_g - lp_e) < 1e-3
    _check_idle_state(small)


def test_aborts_interleaved_with_steps(engines):
    _, small = engines
    scheduler = small.scheduler
    rng = random.Random(6)
    live = set()
    for step in range(60):
        if rng.random() < 0.4:
            rid = f"r{step}"
            ids = random_prompts([rng.randint(1, 20)], seed=step)[0]
            params = SamplingParams(max_new_tokens=rng.randint(1, 30), ignore_eos=True, n=rng.choice([1, 1, 2]))
            scheduler.handle(TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=params))
            live.add(rid)
        if live and rng.random() < 0.2:
            scheduler.handle(AbortReq(rid=rng.choice(sorted(live))))
        out = scheduler.step()
        for o in out.outputs if out else ():
            if o.finished_reason is not None:
                live.discard(o.rid)
    for rid in sorted(live):
        scheduler.handle(AbortReq(rid=rid))
    while scheduler.has_work():
        scheduler.step()
    assert scheduler.metrics.num_retractions > 0  # the pool is small enough to force retraction
    _check_idle_state(small)


def _check_idle_state(engine: Engine) -> None:
    scheduler = engine.scheduler
    scheduler.tree_cache.check_integrity()
    assert scheduler.tree_cache.protected_size() == 0
    assert scheduler.kv_available_size() + scheduler.tree_cache.evictable_size() == scheduler.max_total_num_tokens
    assert scheduler.req_to_token_pool.available_size() == scheduler.req_to_token_pool.size
    assert engine.flush_cache()
    assert scheduler.kv_available_size() == scheduler.max_total_num_tokens
