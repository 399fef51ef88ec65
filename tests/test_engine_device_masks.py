"""The device paths of constrained decoding change no output: masks gathered from the device table
(against host masks every step) and forced text mixed into the decode step (against deferred
jump-forward extends), token for token."""

from __future__ import annotations

import json

import jsonschema
import pytest
from engine_fixtures import PERSON_SCHEMA as SCHEMA
from engine_fixtures import checkpoint, engine_4k, random_prompts, recorded_extend_lens


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return checkpoint(tmp_path_factory, "llama3")


@pytest.fixture(scope="module")
def engine(model_path):
    return engine_4k(model_path)


def _params() -> list[dict]:
    schema = json.dumps(SCHEMA)
    return (
        [{"json_schema": schema, "temperature": 0, "max_new_tokens": 60}] * 2
        + [{"json_schema": schema, "temperature": 1.0, "seed": 5, "max_new_tokens": 24}]  # budget-restricted masks
        + [
            {"regex": r"(yes|no) [0-9]{2,4}\.[a-z]{1,6}", "temperature": 1.0, "seed": i, "max_new_tokens": 30}
            for i in range(2)
        ]
        + [{"choices": ["red apple", "green pear", "blue"], "temperature": 0}, {"temperature": 0, "max_new_tokens": 9}]
    )


def test_device_table_masks_equal_host_masks(model_path, engine):
    prompts = random_prompts([4, 9, 6, 12, 3, 8, 5], seed=51)
    host = engine_4k(model_path, constraint_mask_table_mb=0)
    expected = host.generate(input_ids=prompts, sampling_params=_params())
    assert host.scheduler.sampler.mask_table(engine.scheduler.model_runner.device, 8) is None
    host.shutdown()
    results = engine.generate(input_ids=prompts, sampling_params=_params())
    assert [r["output_ids"] for r in results] == [r["output_ids"] for r in expected]
    tables = list(engine.scheduler.sampler._tables.values())
    assert tables and tables[0].first_visits > 0 and tables[0].num_cached_states() > 0
    assert engine.scheduler.sampler.mask_stats.steps > 0
    for r in results[:2]:
        jsonschema.validate(json.loads(r["text"]), SCHEMA)


def test_forced_text_mixed_into_the_decode_step(model_path, engine):
    """With mixing on from batch 4, the 6 requests' forced tokens run inside the decode steps (steps
    with 1-token and k-token rows side by side) and the greedy outputs equal the deferred schedule's."""
    params = {"json_schema": json.dumps(SCHEMA), "temperature": 0, "max_new_tokens": 60}
    prompts = random_prompts([4, 9, 6, 12, 3, 8], seed=52)
    assert not engine.scheduler.decode.mixes_jump_forward(6)
    expected = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=params)]
    mixed = engine_4k(model_path, mix_jump_forward_min_batch=4)
    with recorded_extend_lens(mixed) as kinds:
        results = mixed.generate(input_ids=prompts, sampling_params=params)
    mixed.shutdown()
    assert [r["output_ids"] for r in results] == expected
    assert any(1 in k and max(k) > 1 for k in kinds[1:])  # a mixed step: decoding and forced rows together
    for r in results:
        jsonschema.validate(json.loads(r["text"]), SCHEMA)


@pytest.mark.gpu
def test_cuda_device_table_and_mixed_steps(model_path):
    """On CUDA (CUDA graphs, overlap on): the device table gives the host masks' greedy outputs token for
    token, and mixed jump-forward steps give valid JSON in fewer forward passes than tokens."""
    prompts = random_prompts([4, 9, 6, 12, 3, 8, 5], seed=53)
    outputs = {}
    for mb in (256, 0):
        engine = engine_4k(model_path, "cuda", constraint_mask_table_mb=mb)
        outputs[mb] = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=_params())]
        engine.shutdown()
    assert outputs[256] == outputs[0]
    params = {"json_schema": json.dumps(SCHEMA), "temperature": 0, "max_new_tokens": 60}
    mixed = engine_4k(model_path, "cuda", mix_jump_forward_min_batch=4)
    results = mixed.generate(input_ids=random_prompts([5] * 16, seed=54), sampling_params=params)
    mixed.shutdown()
    for r in results:
        jsonschema.validate(json.loads(r["text"]), SCHEMA)
    assert sum(r["meta_info"]["forward_passes"] for r in results) < sum(
        r["meta_info"]["completion_tokens"] for r in results
    )
