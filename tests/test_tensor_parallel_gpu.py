"""Tensor parallelism on two GPUs (NCCL): tp=2 greedy tokens equal tp=1 in float32, with CUDA graphs
(the all-reduces captured inside them), overlap scheduling, radix-cache hits, a regex constraint with
jump-forward, and logprobs, for a tiny Llama and (through the Triton fused-MoE kernel on each rank's
slice of the experts) tiny Qwen3-MoE and Mixtral checkpoints; and a tp=2 server answers like a tp=1
engine. Skips without 2 GPUs."""

from __future__ import annotations

import re

import pytest
import requests
import torch
from engine_fixtures import checkpoint, random_prompts
from model_fixtures import make_tiny_checkpoint
from server_fixtures import start_server

from sgl_runtime.engine import Engine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]

REGEX = r"(yes|no), because [a-z]{2,6}\."


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_checkpoint("llama3", tmp_path_factory.mktemp("tp-gpu"))


def _run(path: str, tp_size: int, **extra) -> list[list[int]]:
    first = random_prompts([40, 9, 23, 5, 31, 12, 7, 18], seed=7)
    second = [p + t for p, t in zip(first, random_prompts([3, 6, 2, 5, 4, 8, 1, 3], seed=8))]
    greedy = {"max_new_tokens": 12, "temperature": 0}
    with Engine(path, device="cuda", dtype="float32", tp_size=tp_size, max_total_tokens=8192, **extra) as engine:
        out = engine.generate(input_ids=first, sampling_params=greedy)
        out += engine.generate(
            input_ids=second, sampling_params=[greedy] * 6 + [{**greedy, "regex": REGEX, "max_new_tokens": 16}] * 2
        )
        logprobs = engine.generate(input_ids=first[:2], sampling_params=greedy, return_logprob=True, top_logprobs_num=3)
    assert all(re.fullmatch(REGEX, r["text"]) for r in out[-2:])
    return [r["output_ids"] for r in out + logprobs]


@pytest.mark.parametrize("extra", [{}, {"disable_cuda_graph": True}, {"disable_overlap_schedule": True}])
def test_tp2_equals_tp1_on_cuda(model_path, extra):
    assert _run(model_path, 2, **extra) == _run(model_path, 1, **extra)


@pytest.mark.parametrize("extra", [{}, {"disable_cuda_graph": True}])
@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_moe_tp2_equals_tp1_on_cuda(tmp_path_factory, arch, extra):
    path = checkpoint(tmp_path_factory, arch)
    assert _run(path, 2, **extra) == _run(path, 1, **extra)


def test_tp2_server_matches_the_engine(model_path):
    prompts = random_prompts([12, 5, 30], seed=3)
    params = {"max_new_tokens": 8, "temperature": 0}
    with Engine(model_path, device="cuda", dtype="float32", max_total_tokens=8192) as engine:
        want = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=params)]
    server = start_server("--model-path", model_path, "--device", "cuda", "--dtype", "float32", "--tp-size", "2")
    try:
        got = [
            requests.post(
                f"{server.url}/generate", json={"input_ids": p, "sampling_params": params}, timeout=60
            ).json()["output_ids"]
            for p in prompts
        ]
    finally:
        server.stop()
    assert got == want
