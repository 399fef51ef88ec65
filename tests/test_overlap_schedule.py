"""Overlap scheduling (scheduler/overlap.py) changes when the host reads tokens, never which tokens:
outputs, finish reasons and forward-pass counts match --disable-overlap-schedule exactly, across
every way a request can finish, arrivals mid-decode, aborts and a pool small enough to retract."""

from __future__ import annotations

import random

import pytest
from engine_fixtures import checkpoint, random_prompts
from test_engine_stress import _check_idle_state

from sgl_runtime.engine import Engine
from sgl_runtime.io_struct import AbortReq, TokenizedGenerateReqInput
from sgl_runtime.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return checkpoint(tmp_path_factory, "llama3")


@pytest.fixture(scope="module")
def engines(path):
    """(overlap on, overlap off) on the same checkpoint."""
    on = Engine(path, device="cpu", max_total_tokens=4096)
    off = Engine(path, device="cpu", max_total_tokens=4096, disable_overlap_schedule=True)
    return on, off


def _mixed_params(rng: random.Random, eos_ids: list[int]) -> dict:
    params = {"max_new_tokens": rng.randint(1, 24)}
    kind = rng.choice(["greedy", "sampled", "stop_token", "stop_str", "eos", "n", "min_new"])
    if kind == "greedy":
        params.update(temperature=0, ignore_eos=True)
    elif kind == "sampled":
        params.update(
            temperature=1.0,
            top_p=rng.choice([1.0, 0.9]),
            top_k=rng.choice([-1, 30]),
            min_p=rng.choice([0.0, 0.05]),
            seed=rng.randint(0, 99),
            ignore_eos=True,
        )
    elif kind == "stop_token":  # stop_token_ids sampled often enough to fire: a small random id set
        params.update(temperature=1.0, seed=rng.randint(0, 99), stop_token_ids=list(range(0, 4000, 7)))
    elif kind == "stop_str":
        params.update(temperature=1.0, seed=rng.randint(0, 99), stop=["e", "a"])
    elif kind == "eos":  # every token is an "EOS" for some of these: finishes on the first steps
        params.update(temperature=1.0, seed=rng.randint(0, 99), stop_token_ids=eos_ids)
    elif kind == "n":
        params.update(n=2, temperature=1.0, seed=rng.randint(0, 99), ignore_eos=True)
    else:
        params.update(temperature=0, min_new_tokens=rng.randint(1, 5), ignore_eos=False)
    return params


def _strip(result: dict) -> tuple:
    meta = result["meta_info"]
    return result["output_ids"], meta["finish_reason"], meta["completion_tokens"], meta["forward_passes"]


def test_outputs_identical_with_and_without_overlap(engines):
    on, off = engines
    rng = random.Random(11)
    prompts = random_prompts([rng.randint(1, 30) for _ in range(24)], seed=12, vocab=4000)
    params = [_mixed_params(rng, [rng.randrange(4000) for _ in range(2000)]) for _ in prompts]
    got = on.generate(input_ids=prompts, sampling_params=params)
    expected = off.generate(input_ids=prompts, sampling_params=params)
    assert [_strip(r) for r in got] == [_strip(r) for r in expected]
    reasons = {r["meta_info"]["finish_reason"]["type"] for r in got}
    assert reasons == {"stop", "length"}, reasons
    assert any(isinstance(r["meta_info"]["finish_reason"].get("matched"), str) for r in got)  # a stop string fired
    metrics = on.scheduler.metrics
    assert metrics.overlapped_steps >= 0.7 * metrics.decode_steps > 10, "the decode steps did not overlap"
    assert off.scheduler.metrics.overlapped_steps == 0
    _check_idle_state(on)


def test_forward_passes_count_only_used_steps(engines):
    on, _ = engines
    out = on.generate(
        input_ids=[[5, 6, 7]], sampling_params={"max_new_tokens": 9, "temperature": 0, "ignore_eos": True}
    )
    meta = out[0]["meta_info"]
    assert meta["completion_tokens"] == 9 and meta["forward_passes"] == 9  # the dropped 10th step is not counted
    _check_idle_state(on)


def _drive(engine: Engine, arrivals: dict[int, list], aborts: dict[int, str], max_steps: int = 400) -> dict:
    """Step the scheduler by hand: requests arrive and abort at given steps; returns rid -> outputs."""
    scheduler = engine.scheduler
    results: dict[str, list[int]] = {}
    reasons: dict[str, dict] = {}
    for step in range(max_steps):
        for msg in arrivals.get(step, []):
            scheduler.handle(msg)
        if step in aborts:
            scheduler.handle(AbortReq(rid=aborts[step]))
        if step > max(arrivals) and not scheduler.has_work():
            break
        out = scheduler.step()
        for o in out.outputs if out else ():
            results.setdefault(o.rid, []).extend(o.new_output_ids)
            if o.finished_reason is not None:
                reasons[o.rid] = o.finished_reason
    else:
        raise AssertionError("requests did not finish")
    return {rid: (results.get(rid, []), reasons[rid]) for rid in reasons}


def _arrivals(seed: int) -> dict[int, list]:
    rng = random.Random(seed)
    arrivals: dict[int, list] = {}
    for i in range(12):
        step = rng.choice([0, 0, 3, 7, 8, 15, 22])
        ids = random_prompts([rng.randint(1, 25)], seed=100 + i, vocab=4000)[0]
        params = SamplingParams(max_new_tokens=rng.randint(1, 20), temperature=0, ignore_eos=True)
        arrivals.setdefault(step, []).append(
            TokenizedGenerateReqInput(rid=f"r{i}", input_text=None, input_ids=ids, sampling_params=params)
        )
    return arrivals


def test_arrivals_and_aborts_mid_decode_match_step_by_step(engines):
    on, off = engines
    aborts = {5: "r3", 9: "r7", 16: "r0"}
    got = _drive(on, _arrivals(3), aborts)
    expected = _drive(off, _arrivals(3), aborts)
    assert got.keys() == expected.keys() and len(got) == 12
    for rid in got:
        if expected[rid][1]["type"] == "abort":  # where an abort lands may differ by one step
            assert got[rid][1]["type"] in ("abort", "length")
            continue
        assert got[rid] == expected[rid], rid
    _check_idle_state(on)
    _check_idle_state(off)


def test_tiny_pool_retracts_under_overlap_with_identical_output(path):
    big = Engine(path, device="cpu", max_total_tokens=4096, disable_overlap_schedule=True)
    small = Engine(
        path,
        device="cpu",
        max_total_tokens=90,
        chunked_prefill_size=8,
        max_prefill_tokens=16,
        schedule_conservativeness=0.2,
        max_running_requests=6,
    )
    prompts = random_prompts([12, 3, 17, 8, 20, 5, 9, 14], seed=40, vocab=4000)
    params = {"max_new_tokens": 30, "temperature": 0, "ignore_eos": True}
    expected = big.generate(input_ids=prompts, sampling_params=params)
    got = small.generate(input_ids=prompts, sampling_params=params)
    assert [r["output_ids"] for r in got] == [r["output_ids"] for r in expected]
    assert small.scheduler.metrics.num_retractions > 0 and small.scheduler.metrics.overlapped_steps > 0
    _check_idle_state(small)


def test_constrained_and_logprob_requests_run_step_by_step_beside_overlapped_ones(engines):
    on, off = engines
    prompts = random_prompts([6, 9, 4], seed=7, vocab=4000)
    params = [
        {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True},
        {"max_new_tokens": 12, "regex": "[a-z]{3,8}", "temperature": 0},
        {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True, "frequency_penalty": 0.5},
    ]
    got = on.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
    expected = off.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
    for g, e in zip(got, expected):
        assert _strip(g) == _strip(e)
        assert [t for _, t, _ in g["meta_info"]["output_token_logprobs"]] == g["output_ids"]
    _check_idle_state(on)


def test_constraints_penalties_and_min_new_tokens_overlap_when_jump_forward_is_off(path):
    """Sampling after the read-back sees the exact host state: masks, penalties and min_new_tokens."""
    engines = [
        Engine(
            path, device="cpu", max_total_tokens=4096, disable_jump_forward=True, disable_overlap_schedule=not overlap
        )
        for overlap in (True, False)
    ]
    prompts = random_prompts([6, 9, 4, 12, 3], seed=8, vocab=4000)
    params = [
        {"max_new_tokens": 16, "regex": "[a-z]{3,8}( [0-9]+)?", "temperature": 1.0, "seed": 3},
        {
            "max_new_tokens": 20,
            "json_schema": '{"type": "object", "properties": {"a": {"type": "integer"}}, '
            '"required": ["a"], "additionalProperties": false}',
            "temperature": 0,
        },
        {
            "max_new_tokens": 14,
            "temperature": 0,
            "ignore_eos": True,
            "frequency_penalty": 1.5,
            "presence_penalty": 0.5,
            "repetition_penalty": 1.3,
        },
        {
            "max_new_tokens": 10,
            "temperature": 1.0,
            "seed": 4,
            "min_new_tokens": 6,
            "stop_token_ids": list(range(0, 4000, 3)),
        },
        {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True},
    ]
    got, expected = (e.generate(input_ids=prompts, sampling_params=params) for e in engines)
    assert [_strip(r) for r in got] == [_strip(r) for r in expected]
    assert len(got[3]["output_ids"]) >= 6
    assert engines[0].scheduler.metrics.overlapped_steps >= 8
    for engine in engines:
        _check_idle_state(engine)


def test_jump_forward_in_overlapped_steps_matches_step_by_step(engines, path, monkeypatch):
    """With overlapped jump-forward (DecodePolicy.overlap_jump_forward_min_batch), forced text joins the chain one step
    after the token that forced it (a mixed step: device ids for some requests, forced tokens for others), and
    outputs, finish reasons and forward-pass counts stay those of step-by-step jump-forward.

    The constraints are compiled (and cached) before the compared run, so every request joins the first batch: the
    schedule, and so whether a chain of steps meets a forced span, does not depend on how fast the compile workers
    answer (on a loaded machine they used to answer late, and the requests then ran in other groupings)."""
    from sgl_runtime.scheduler import overlap

    mixed_steps = []
    launch = overlap.launch_forward

    def recording(batch, runner, next_input_ids=None, on_device=None):
        if next_input_ids is not None and on_device is not None and not all(on_device):
            mixed_steps.append(sum(not d for d in on_device))
        return launch(batch, runner, next_input_ids, on_device)

    monkeypatch.setattr(overlap, "launch_forward", recording)
    on = Engine(path, device="cpu", max_total_tokens=4096, overlap_jump_forward_min_batch=1)
    off = engines[1]
    schema = (
        '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "level": {"enum": '
        '["junior", "senior"]}, "ok": {"type": "boolean"}}, "required": ["name", "level", "ok"], '
        '"additionalProperties": false}'
    )
    prompts = random_prompts([6, 9, 4, 12, 3, 7, 5], seed=9, vocab=4000) + random_prompts([8, 10, 5, 11], seed=11)
    params = [
        {"max_new_tokens": 40, "json_schema": schema, "temperature": 0},
        {"max_new_tokens": 40, "json_schema": schema, "temperature": 1.0, "seed": 5},
        {"max_new_tokens": 16, "regex": "(alpha|beta)-[0-9]{2}-(gamma|delta)", "temperature": 0},
        {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True},
        {"max_new_tokens": 9, "json_schema": schema, "temperature": 0},  # cut by its budget
        {"max_new_tokens": 20, "temperature": 1.0, "seed": 2, "ignore_eos": True, "frequency_penalty": 0.7},
        {"max_new_tokens": 30, "regex": r'\{"id": [0-9]{1,3}, "tag": "(x|y)"\}', "temperature": 1.0, "seed": 8},
    ] + [  # free stretches between forced spans: chains of steps form while these requests still force text
        {"max_new_tokens": 40, "regex": "[a-z]{4,8}(-[0-9]{2}-[a-z]{4,8}){4}", "temperature": t, "seed": s}
        for t, s in ((0, 0), (1.0, 3), (1.0, 4), (1.0, 6))
    ]
    for engine in (on, off):  # compile every constraint first (one-token requests), then start from an empty cache
        engine.generate(input_ids=[[1]] * len(params), sampling_params=[{**p, "max_new_tokens": 1} for p in params])
        assert engine.flush_cache()
    mixed_steps.clear()
    got, expected = (e.generate(input_ids=prompts, sampling_params=params) for e in (on, off))
    assert [_strip(r) for r in got] == [_strip(r) for r in expected]
    assert mixed_steps, "no step mixed device ids with forced tokens"
    assert on.scheduler.metrics.overlapped_steps >= 10
    _check_idle_state(on)
