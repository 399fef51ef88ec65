"""Prompt and output logprobs (and SGLang's token_ids_logprob) equal log_softmax of transformers' logits,
also when the prefix is cached."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import checkpoint, hf_logprobs, random_prompts

from sgl_runtime.engine import Engine
from sgl_runtime.sampling_params import InvalidRequestError

TOL = 1e-3
GREEDY = {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return checkpoint(tmp_path_factory, "llama3")


@pytest.fixture(scope="module")
def engine(model_path):
    return Engine(model_path, device="cpu", max_total_tokens=2048, chunked_prefill_size=8)


def _check_entries(entries, reference: torch.Tensor, ids: list[int], first: int) -> None:
    """entries[j] scores token ids[first + j] given ids[:first + j] (token 0 has no logprob)."""
    assert len(entries) == len(ids) - first
    for j, (logprob, token_id, _text) in enumerate(entries):
        t = first + j
        assert token_id == ids[t]
        if t == 0:
            assert logprob is None
        else:
            assert logprob == pytest.approx(float(reference[t - 1, ids[t]]), abs=TOL)


@pytest.mark.parametrize("start", [0, 1, 5, 19])
def test_prompt_logprobs_match_transformers(model_path, engine, start):
    (prompt,) = random_prompts((20,), seed=11)
    r = engine.generate(
        input_ids=prompt, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=start
    )
    _check_entries(r["meta_info"]["input_token_logprobs"], hf_logprobs(model_path, prompt), prompt, start)


def test_prompt_logprobs_exact_when_the_prompt_is_cached(model_path, engine):
    assert engine.flush_cache()
    (prompt,) = random_prompts((30,), seed=12)
    engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": 0})  # cache the whole prompt
    r = engine.generate(
        input_ids=prompt,
        sampling_params={"max_new_tokens": 0},
        return_logprob=True,
        logprob_start_len=10,
        top_logprobs_num=3,
        return_text_in_logprobs=True,
    )
    assert r["meta_info"]["cached_tokens"] == 9  # position 9's logits score token 10: recomputed
    reference = hf_logprobs(model_path, prompt)
    _check_entries(r["meta_info"]["input_token_logprobs"], reference, prompt, 10)
    tops = r["meta_info"]["input_top_logprobs"]
    assert len(tops) == 20
    for j, top in enumerate(tops):
        values, ids = reference[9 + j].topk(3)
        assert [e[1] for e in top] == ids.tolist()
        assert [e[0] for e in top] == pytest.approx(values.tolist(), abs=TOL)
        assert all(isinstance(e[2], str) for e in top)


def test_output_logprobs_match_transformers(model_path, engine):
    prompts = random_prompts((6, 13), seed=13)
    results = engine.generate(
        input_ids=prompts,
        sampling_params={"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
        return_logprob=True,
        top_logprobs_num=2,
    )
    for prompt, r in zip(prompts, results):
        full = prompt + r["output_ids"]
        reference = hf_logprobs(model_path, full)
        entries = r["meta_info"]["output_token_logprobs"]
        assert [e[1] for e in entries] == r["output_ids"]
        for j, (logprob, token_id, text) in enumerate(entries):
            assert text is None
            assert logprob == pytest.approx(float(reference[len(prompt) - 1 + j, token_id]), abs=TOL)
            top = r["meta_info"]["output_top_logprobs"][j]
            assert top[0][1] == token_id  # greedy picks the top token
        assert r["meta_info"]["input_token_logprobs"] == []  # logprob_start_len -1: no prompt logprobs


# ---------------------------------------------------------------- token_ids_logprob
def _check_positions(positions, reference, ids: list[int], first_row: int) -> None:
    """positions[j] lists [logprob, id, text] for each of `ids`, scored by reference row first_row + j."""
    for j, entries in enumerate(positions):
        assert [e[1] for e in entries] == ids
        expected = [float(reference[first_row + j, t]) for t in ids]
        assert [e[0] for e in entries] == pytest.approx(expected, abs=TOL)


def test_engine_prompt_and_output_positions_match_transformers(model_path, engine):
    (prompt,) = random_prompts((20,), seed=31)  # 20 tokens over chunks of 8: scored across chunk boundaries
    ids = [5, 17, 3, 17]  # request order kept, repeats included (as SGLang)
    r = engine.generate(
        input_ids=prompt, sampling_params=GREEDY, return_logprob=True, logprob_start_len=0, token_ids_logprob=ids
    )
    meta = r["meta_info"]
    reference = hf_logprobs(model_path, prompt + r["output_ids"])
    inputs = meta["input_token_ids_logprobs"]
    assert len(inputs) == len(prompt) and inputs[0] is None  # token 0 has no logprob
    _check_positions(inputs[1:], reference, ids, first_row=0)
    outputs = meta["output_token_ids_logprobs"]
    assert len(outputs) == len(r["output_ids"]) == 5
    _check_positions(outputs, reference, ids, first_row=len(prompt) - 1)
    assert all(e[2] is None for pos in outputs for e in pos)


def test_engine_batch_takes_one_list_per_prompt(model_path, engine):
    prompts = random_prompts((9, 14), seed=32)
    results = engine.generate(
        input_ids=prompts,
        sampling_params=GREEDY,
        return_logprob=True,
        logprob_start_len=6,
        token_ids_logprob=[[1, 2], [40, 41, 42]],
        return_text_in_logprobs=True,
    )
    for prompt, ids, r in zip(prompts, [[1, 2], [40, 41, 42]], results):
        reference = hf_logprobs(model_path, prompt + r["output_ids"])
        inputs = r["meta_info"]["input_token_ids_logprobs"]
        assert len(inputs) == len(prompt) - 6  # tokens 6.. scored by rows 5..
        _check_positions(inputs, reference, ids, first_row=5)
        _check_positions(r["meta_info"]["output_token_ids_logprobs"], reference, ids, first_row=len(prompt) - 1)
        assert all(isinstance(e[2], str) for pos in inputs for e in pos)


def test_engine_shared_list_and_absent_when_not_asked(engine):
    prompts = random_prompts((6, 7), seed=33)
    shared = engine.generate(input_ids=prompts, sampling_params=GREEDY, return_logprob=True, token_ids_logprob=[9])
    assert all(len(r["meta_info"]["output_token_ids_logprobs"]) == 5 for r in shared)
    assert all(r["meta_info"]["input_token_ids_logprobs"] == [] for r in shared)  # no prompt logprobs asked
    plain = engine.generate(input_ids=prompts[0], sampling_params=GREEDY, return_logprob=True)
    assert "output_token_ids_logprobs" not in plain["meta_info"]


@pytest.mark.parametrize(
    "value, message",
    [
        ([3, 10**9], "token_ids_logprob: token id 1000000000 is outside the vocabulary"),
        ([[3]], "token_ids_logprob is a list of lists but the request has a single prompt"),
        ("3", "token_ids_logprob must be a list"),
        ([1.5], "token_ids_logprob must be a list of integer token ids"),
    ],
)
def test_engine_rejects_bad_ids(engine, value, message):
    with pytest.raises(InvalidRequestError, match=message):
        engine.generate(input_ids=[1, 2, 3], sampling_params=GREEDY, return_logprob=True, token_ids_logprob=value)
