"""Admission control: requests that surely decode max_new_tokens (EOS ignored, no stop strings or
ids, no constraint) reserve their whole remaining output, so a KV pool that cannot keep more of
them admits no more; requests that might stop early reserve the decaying estimate and may be
retracted when it proves optimistic."""

from __future__ import annotations

import pytest
from engine_fixtures import checkpoint, random_prompts

from sgl_runtime.engine import Engine
from sgl_runtime.sampling_params import SamplingParams
from sgl_runtime.scheduler.prefill_adder import reserved_tokens, runs_to_length
from sgl_runtime.scheduler.req import Req


@pytest.mark.parametrize(
    "params, certain",
    [
        (SamplingParams(max_new_tokens=40, ignore_eos=True), True),
        (SamplingParams(max_new_tokens=40), False),  # EOS may come early
        (SamplingParams(max_new_tokens=40, ignore_eos=True, stop=["END"]), False),
        (SamplingParams(max_new_tokens=40, ignore_eos=True, stop_token_ids=[7]), False),
        (SamplingParams(max_new_tokens=40, ignore_eos=True, regex="[a-z]+"), False),
    ],
)
def test_reservation_follows_whether_the_length_is_certain(params, certain):
    req = Req("r", [1, 2, 3], params)
    req.output_ids = [5] * 10
    assert runs_to_length(req) is certain
    assert reserved_tokens(req, 0.25) == (30 if certain else 7.5)
    assert reserved_tokens(req, 0.25, certain_ratio=0.5) == (15 if certain else 7.5)


def test_certain_length_requests_are_not_admitted_beyond_the_pool(tmp_path_factory):
    path = checkpoint(tmp_path_factory, "llama3")
    prompts = random_prompts([10] * 8, seed=3, vocab=4000)
    kwargs = dict(device="cpu", max_total_tokens=160, chunked_prefill_size=-1, max_running_requests=8)
    certain = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}
    # The same requests with a stop string they never produce: lengths the scheduler cannot know.
    uncertain = {**certain, "stop": ["<never produced>"]}
    results = {}
    for name, params in (("certain", certain), ("uncertain", uncertain)):
        engine = Engine(path, **kwargs)
        results[name] = engine.generate(input_ids=prompts, sampling_params=params)
        results[name + "_retractions"] = engine.scheduler.metrics.num_retractions
    assert results["uncertain_retractions"] > 0  # 0.7 x remaining reserved: a third request squeezes in
    assert results["certain_retractions"] == 0  # 50 tokens each: three fit in 160, and no more are admitted
    assert [r["output_ids"] for r in results["certain"]] == [r["output_ids"] for r in results["uncertain"]]
    assert all(r["meta_info"]["completion_tokens"] == 40 for r in results["certain"])
