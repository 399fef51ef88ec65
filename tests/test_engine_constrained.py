"""Constrained generation through the scheduler: outputs satisfy the constraint, jump-forward saves
forward passes, compile errors fail only their own request."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from engine_fixtures import PERSON_SCHEMA as SCHEMA
from engine_fixtures import checkpoint, engine_4k, random_prompts, recorded_extend_lens

from sgl_runtime.engine import Engine
from sgl_runtime.sampling_params import InvalidRequestError

REGEX = r"(yes|no|maybe) [0-9]{2,4}\.[a-z]{1,6}"


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return checkpoint(tmp_path_factory, "llama3")


@pytest.fixture(scope="module")
def engine(model_path):
    return engine_4k(model_path)


def _prompts(n: int) -> list[list[int]]:
    return random_prompts([5] * n, seed=41)


def test_regex_outputs_match_at_temperature_1(engine):
    params = [{"regex": REGEX, "temperature": 1.0, "max_new_tokens": 40, "seed": i} for i in range(8)]
    results = engine.generate(input_ids=_prompts(8), sampling_params=params)
    for r in results:
        assert r["meta_info"]["finish_reason"]["type"] == "stop", r
        assert re.fullmatch(REGEX, r["text"]), r["text"]


@pytest.mark.parametrize("jump_forward", [True, False])
def test_json_schema_outputs_validate_and_jump_forward_saves_passes(model_path, engine, jump_forward):
    target = engine if jump_forward else engine_4k(model_path, disable_jump_forward=True)
    params = [
        {"json_schema": json.dumps(SCHEMA), "temperature": 1.0, "max_new_tokens": 80, "seed": i} for i in range(6)
    ]
    results = target.generate(input_ids=_prompts(6), sampling_params=params)
    for r in results:
        meta = r["meta_info"]
        assert meta["finish_reason"]["type"] == "stop", r
        jsonschema.validate(json.loads(r["text"]), SCHEMA)
        if jump_forward:
            assert meta["forward_passes"] < meta["completion_tokens"], meta
        else:
            assert meta["forward_passes"] == meta["completion_tokens"], meta


def test_choices_constraint(engine):
    choices = ["red", "green", "blue sky"]
    results = engine.generate(input_ids=_prompts(4), sampling_params={"choices": choices, "temperature": 1.0})
    assert all(r["text"] in choices for r in results)


def test_bad_regex_fails_only_its_request(engine):
    with pytest.raises(InvalidRequestError, match="regex"):
        engine.generate(input_ids=_prompts(2), sampling_params=[{"regex": "(unclosed"}, {"max_new_tokens": 3}])
    ok = engine.generate(input_ids=_prompts(1)[0], sampling_params={"max_new_tokens": 3, "ignore_eos": True})
    assert ok["meta_info"]["completion_tokens"] == 3


def test_forced_text_is_jumped_over_from_the_start(engine):
    r = engine.generate(
        input_ids=_prompts(1)[0], sampling_params={"regex": "The answer is (42|43)!", "temperature": 1.0}
    )
    assert re.fullmatch("The answer is (42|43)!", r["text"])
    assert r["meta_info"]["forward_passes"] <= 3 < r["meta_info"]["completion_tokens"]
    fixed = engine.generate(input_ids=_prompts(1)[0], sampling_params={"regex": "fully forced"})
    assert fixed["text"] == "fully forced" and fixed["meta_info"]["forward_passes"] == 0


def test_jump_forward_under_retraction_gives_identical_greedy_output(model_path, engine):
    schema = {
        "type": "object",
        "properties": {
            "a_rather_long_fixed_key": {"type": "string", "maxLength": 16},
            "another_quite_long_key_name": {"enum": ["alpha", "beta"]},
        },
        "required": ["a_rather_long_fixed_key", "another_quite_long_key_name"],
        "additionalProperties": False,
    }
    params = {"json_schema": json.dumps(schema), "temperature": 0, "max_new_tokens": 24}
    prompts = random_prompts([4, 9, 6, 12, 3, 8], seed=43)
    expected = engine.generate(input_ids=prompts, sampling_params=params)
    small = Engine(model_path, device="cpu", max_total_tokens=48, chunked_prefill_size=8, schedule_conservativeness=0.1)
    results = small.generate(input_ids=prompts, sampling_params=params)
    assert small.scheduler.metrics.num_retractions > 0
    assert [r["output_ids"] for r in results] == [r["output_ids"] for r in expected]
    for r in results:  # some hit max_new_tokens (a prefix of valid JSON); the others are complete
        if r["meta_info"]["finish_reason"]["type"] == "stop":
            jsonschema.validate(json.loads(r["text"]), schema)
    assert any(r["meta_info"]["forward_passes"] < r["meta_info"]["completion_tokens"] for r in results)


def test_deferred_jump_forward_keeps_decode_steps_single_token(model_path, engine):
    """Requests holding forced tokens sit out plain decode steps (which stay 1-token DECODE batches,
    the CUDA-graph path) and run together as an extend; greedy output equals the mixed-batch schedule."""
    params = {"json_schema": json.dumps(SCHEMA), "temperature": 0, "max_new_tokens": 60}
    prompts = random_prompts([4, 9, 6, 12, 3, 8, 5, 7], seed=44)
    mixed = engine_4k(model_path, defer_jump_forward=False)
    expected = [r["output_ids"] for r in mixed.generate(input_ids=prompts, sampling_params=params)]
    scheduler = engine.scheduler
    assert scheduler.decode.defer_jump_forward
    with recorded_extend_lens(engine) as kinds:
        results = engine.generate(input_ids=prompts, sampling_params=params)
    assert [r["output_ids"] for r in results] == expected
    decode_steps = [k for k in kinds if 1 in k]
    assert decode_steps and all(k == {1} for k in decode_steps)  # never a 1-token row beside a k-token one
    assert any(max(k) > 1 for k in kinds[1:])  # the jump-forward extends ran
    assert any(r["meta_info"]["forward_passes"] < r["meta_info"]["completion_tokens"] for r in results)
