"""Request handling: bad input raises naming the field, abort frees memory, flush only when idle, streaming."""

from __future__ import annotations

import pytest
from engine_fixtures import checkpoint, random_prompts

from sgl_runtime.engine import Engine
from sgl_runtime.io_struct import AbortReq, FlushCacheReq, TokenizedGenerateReqInput
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine(checkpoint(tmp_path_factory, "qwen2"), device="cpu", max_total_tokens=256)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"prompt": "hi", "sampling_params": {"max_new_tokenz": 3}}, "max_new_tokenz"),
        ({"prompt": "hi", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
        ({"prompt": "hi", "sampling_params": {"temperature": -0.5}}, "temperature"),
        ({"prompt": "hi", "sampling_params": {"top_p": 0.0}}, "top_p"),
        ({"prompt": "hi", "sampling_params": {"top_p": 1.5}}, "top_p"),
        ({"prompt": ""}, "prompt"),
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [1] * 600}, "prompt"),  # the tiny checkpoints have a context length of 512
        ({"prompt": "a", "input_ids": [1]}, "text or input_ids"),  # the Engine's prompt is /generate's text
    ],
)
def test_bad_input_raises_naming_the_field(engine, kwargs, field):
    with pytest.raises(InvalidRequestError, match=field.replace("/", ".")):
        engine.generate(**kwargs)


def _request(rid: str, ids: list[int], max_new: int, stream: bool = False, **params) -> TokenizedGenerateReqInput:
    return TokenizedGenerateReqInput(
        rid=rid,
        input_text=None,
        input_ids=ids,
        stream=stream,
        sampling_params=SamplingParams(max_new_tokens=max_new, ignore_eos=True, **params),
    )


def test_abort_running_and_queued_requests_frees_memory(engine):
    scheduler = engine.scheduler
    assert engine.flush_cache()
    a, b = random_prompts((30, 20), seed=31)
    scheduler.handle(_request("run", a, 200))
    for _ in range(3):
        scheduler.step()
    scheduler.handle(_request("queued", b, 200))
    assert scheduler.handle(FlushCacheReq()).success is False  # busy: refused
    scheduler.handle(AbortReq(rid="run"))
    scheduler.handle(AbortReq(rid="queued"))
    out = scheduler.step()
    finished = {o.rid: o.finished_reason for o in out.outputs}
    assert finished == {
        "run": {"type": "abort", "message": "aborted"},
        "queued": {"type": "abort", "message": "aborted"},
    }
    assert not scheduler.has_work()
    scheduler.tree_cache.check_integrity()
    assert scheduler.tree_cache.protected_size() == 0
    assert scheduler.kv_available_size() + scheduler.tree_cache.evictable_size() == scheduler.max_total_num_tokens
    assert scheduler.handle(FlushCacheReq()).success is True
    assert scheduler.kv_available_size() == scheduler.max_total_num_tokens
    assert scheduler.req_to_token_pool.available_size() == scheduler.req_to_token_pool.size


def test_streaming_outputs_arrive_every_interval(engine):
    scheduler = engine.scheduler
    (prompt,) = random_prompts((5,), seed=32)
    scheduler.handle(_request("s", prompt, 6, stream=True, temperature=0))
    chunks = []
    while scheduler.has_work():
        out = scheduler.step()
        chunks.extend(o for o in (out.outputs if out else ()) if o.rid == "s")
    assert [len(c.new_output_ids) for c in chunks] == [1] * 6
    assert [c.finished_reason is not None for c in chunks] == [False] * 5 + [True]
    assert chunks[-1].completion_tokens == 6


def test_scheduler_rejects_bad_messages_per_request(engine):
    scheduler = engine.scheduler
    scheduler.handle(_request("empty", [], 3))
    scheduler.handle(_request("huge", [1] * 300, 3))  # longer than the 256-token pool
    out = scheduler.step()
    errors = {o.rid: o.error for o in out.outputs}
    assert "empty" in errors["empty"] and "KV cache" in errors["huge"]
    assert all(o.finished_reason["type"] == "abort" for o in out.outputs)


def test_get_stats(engine):
    stats = engine.get_stats()
    for key in (
        "num_running_reqs",
        "num_waiting_reqs",
        "token_usage",
        "cache_hit_rate",
        "gen_throughput",
        "max_total_num_tokens",
        "available_kv_tokens",
    ):
        assert key in stats
    assert stats["max_total_num_tokens"] == 256


def test_warmup_forward_runs_through_temporary_pools(engine):
    runner = engine.scheduler.model_runner
    free_before = runner.token_to_kv_pool.available_size()
    logits = runner.warmup_forward(16)
    assert logits.shape == (1, runner.model_config.vocab_size)
    assert runner.token_to_kv_pool.available_size() == free_before  # the real pools are untouched


def test_a_failing_batch_fails_its_requests_and_the_scheduler_keeps_serving(engine, monkeypatch):
    scheduler = engine.scheduler
    assert engine.flush_cache()
    a, b = random_prompts((12, 9), seed=33)
    scheduler.handle(_request("ok-before", a, 4))
    scheduler.step()  # prefill
    real_forward = scheduler.model_runner.forward

    def broken(forward_batch):
        raise RuntimeError("simulated kernel failure")

    monkeypatch.setattr(scheduler.model_runner, "forward", broken)
    out = scheduler.step()
    assert [(o.rid, o.finished_reason["type"]) for o in out.outputs] == [("ok-before", "abort")]
    assert "simulated kernel failure" in out.outputs[0].error
    monkeypatch.setattr(scheduler.model_runner, "forward", real_forward)
    scheduler.tree_cache.check_integrity()
    assert scheduler.tree_cache.protected_size() == 0
    assert scheduler.kv_available_size() + scheduler.tree_cache.evictable_size() == scheduler.max_total_num_tokens
    r = engine.generate(input_ids=b, sampling_params={"max_new_tokens": 3, "ignore_eos": True})
    assert r["meta_info"]["completion_tokens"] == 3


@pytest.mark.parametrize("policy", ["fcfs", "dfs-weight", "random"])
def test_every_policy_and_a_running_cap_give_the_same_greedy_output(engine, policy):
    base = random_prompts((20,), seed=34)[0]
    prompts = [base + tail for tail in random_prompts((2, 5, 1, 7), seed=35)] + random_prompts((6,), seed=36)
    params = {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}
    expected = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=params)]
    other = Engine(
        engine.server_args.model_path,
        device="cpu",
        max_total_tokens=256,
        schedule_policy=policy,
        max_running_requests=2,
    )
    assert [r["output_ids"] for r in other.generate(input_ids=prompts, sampling_params=params)] == expected
    assert other.get_stats()["cache_hit_rate"] > 0


def test_a_failure_after_the_forward_also_frees_everything(engine, monkeypatch):
    scheduler = engine.scheduler
    assert engine.flush_cache()
    (prompt,) = random_prompts((15,), seed=37)

    class BrokenSampler:  # sampling raises; the rest of the sampler (mask prefetch before the forward) works
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def __call__(self, logits, reqs):
            raise ValueError("simulated sampler failure")

    monkeypatch.setattr(scheduler, "sampler", BrokenSampler(scheduler.sampler))
    scheduler.handle(_request("x", prompt, 4))
    out = scheduler.step()
    assert out.outputs[0].finished_reason["type"] == "abort" and "sampler failure" in out.outputs[0].error
    assert scheduler.tree_cache.total_size() == 0  # failed requests' KV is freed, not cached
    assert scheduler.kv_available_size() == scheduler.max_total_num_tokens


def test_an_offline_batch_may_exceed_the_servers_per_request_cap(engine):
    """--max-sequences-per-request (512) guards HTTP clients; Engine.generate takes a larger batch."""
    prompts = [[1 + i % 50, 2, 3] for i in range(600)]
    outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": 1, "temperature": 0})
    assert len(outs) == 600 and all(len(o["output_ids"]) == 1 for o in outs)


def test_an_engine_dropped_without_shutdown_leaves_no_pending_task(tmp_path, tmp_path_factory):
    """A script that never calls shutdown() exits cleanly: no "Task was destroyed but it is pending"."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = tmp_path / "no_shutdown.py"
    script.write_text(
        "from sgl_runtime.engine import Engine\n"
        f"engine = Engine({str(checkpoint(tmp_path_factory, 'qwen2'))!r}, dtype='float32')\n"
        "print(engine.generate(input_ids=[1, 2, 3], sampling_params={'max_new_tokens': 2})['output_ids'])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Task was destroyed" not in done.stderr, done.stderr[-3000:]
