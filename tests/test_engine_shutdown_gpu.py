"""Engine.shutdown() gives back the device memory it took: after one Engine is shut down, the free
memory is back near the baseline and a second Engine sizes the same KV pool (it used to find none)."""

import gc

import pytest
import torch
from model_fixtures import make_tiny_checkpoint

from sgl_runtime.engine import Engine

pytestmark = pytest.mark.gpu
SLACK_BYTES = 256 << 20  # compiled kernel modules and allocator bookkeeping that stay with the process


def test_shutdown_returns_device_memory_and_a_second_engine_gets_the_same_pool(tmp_path):
    path = make_tiny_checkpoint("qwen2", tmp_path / "qwen2")
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the CUDA context exists before the baseline
    gc.collect()  # what earlier tests in this process left to the collector is not counted against this one
    torch.cuda.empty_cache()
    baseline = torch.cuda.mem_get_info()[0]
    allocated = torch.cuda.memory_allocated()  # what earlier tests in this process still hold
    first = Engine(path, device="cuda", dtype="bfloat16")
    pool = first.scheduler.max_total_num_tokens
    first.generate(input_ids=[1, 2, 3, 4], sampling_params={"max_new_tokens": 8, "temperature": 0})
    assert baseline - torch.cuda.mem_get_info()[0] > 0.5 * baseline  # the pool took most of the device
    first.shutdown()
    assert baseline - torch.cuda.mem_get_info()[0] < SLACK_BYTES
    assert torch.cuda.memory_allocated() - allocated < SLACK_BYTES
    second = Engine(path, device="cuda", dtype="bfloat16")
    try:
        assert abs(second.scheduler.max_total_num_tokens - pool) <= 0.01 * pool, (
            pool,
            second.scheduler.max_total_num_tokens,
        )
        out = second.generate(
            input_ids=[1, 2, 3, 4], sampling_params={"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
        )
        assert len(out["output_ids"]) == 8
    finally:
        second.shutdown()
