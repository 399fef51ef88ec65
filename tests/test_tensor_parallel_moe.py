"""Mixture of experts under tensor parallelism on the CPU (gloo): tp=2 engines give the same greedy tokens
as tp=1 for tiny random Qwen3-MoE and Mixtral checkpoints loaded from disk through the real loader, with
radix-cache hits, a regex constraint with jump-forward, and logprobs within fp32 tolerance; each rank
reads from the safetensors files only its half of every expert; dummy weights keep the router replicated;
and experts that do not split over the ranks fail start-up in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from engine_fixtures import checkpoint, random_prompts
from model_fixtures import expert_shards
from tp_harness import assert_cache_hits_and_jump_forward, assert_logprobs_match, assert_tokens_equal, runs_by_tp

from sgl_runtime.distributed.parallel_state import TPGroup
from sgl_runtime.engine import Engine
from sgl_runtime.kernels.fused_moe import fused_experts_torch
from sgl_runtime.layers.moe import select_experts
from sgl_runtime.model_loader.loader import load_model

ARCHS = ("qwen3_moe", "mixtral")
HIDDEN, EXPERT_I = 64, 32  # both tiny recipes' hidden size and expert intermediate size


def _workload() -> tuple[list[list[int]], list[list[int]]]:
    first = random_prompts([33, 9, 21, 5, 14, 7], seed=11)
    return first, [p + t for p, t in zip(first, random_prompts([3, 5, 2, 4, 6, 1], seed=12))]


@pytest.fixture(scope="module", params=ARCHS)
def runs(request, tmp_path_factory) -> dict[int, dict]:
    path = checkpoint(tmp_path_factory, request.param)
    return runs_by_tp(path, *_workload())


def test_moe_tp2_greedy_tokens_equal_tp1(runs):
    assert_tokens_equal(runs)
    assert_cache_hits_and_jump_forward(runs)


def test_moe_tp2_logprobs_match_tp1_in_fp32(runs):
    assert_logprobs_match(runs)


@pytest.mark.parametrize("tp_size", [2, 4])
def test_sharded_experts_sum_to_the_whole_experts(tp_size):
    """What each rank's experts compute (its slice of the intermediate dimension) adds up, over the ranks,
    to the unsharded experts' output: the all-reduce's input is right."""
    gen = torch.Generator().manual_seed(0)
    x, logits = torch.randn(29, 48, generator=gen), torch.randn(29, 6, generator=gen)
    w13, w2 = torch.randn(6, 2 * 40, 48, generator=gen) / 7, torch.randn(6, 48, 40, generator=gen) / 6
    weights, ids = select_experts(logits, 2, renormalize=True)
    partial = [fused_experts_torch(x, a, b, weights, ids) for a, b in expert_shards(w13, w2, tp_size)]
    assert all(a.shape == (6, 2 * 40 // tp_size, 48) for a, _ in expert_shards(w13, w2, tp_size))
    torch.testing.assert_close(sum(partial), fused_experts_torch(x, w13, w2, weights, ids), rtol=1e-5, atol=1e-5)


class _ReadRecorder:
    """safetensors' safe_open, recording the shape of every slice a rank actually reads."""

    def __init__(self, real_open, reads: dict[str, list[tuple[int, ...]]]):
        self.real_open, self.reads = real_open, reads

    def __call__(self, *args, **kwargs):
        return _RecordingFile(self.real_open(*args, **kwargs), self.reads)


class _RecordingFile:
    def __init__(self, handle, reads):
        self.handle, self.reads = handle, reads

    def __enter__(self):
        self.file = self.handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)

    def keys(self):
        return self.file.keys()

    def get_slice(self, name):
        return _RecordingSlice(name, self.file.get_slice(name), self.reads)


class _RecordingSlice:
    def __init__(self, name, inner, reads):
        self.name, self.inner, self.reads = name, inner, reads

    def get_shape(self):
        return self.inner.get_shape()

    def __getitem__(self, index):
        tensor = self.inner[index]
        self.reads.setdefault(self.name, []).append(tuple(tensor.shape))
        return tensor


@pytest.mark.parametrize("arch", ARCHS)
def test_each_rank_reads_only_its_half_of_every_expert(tmp_path_factory, monkeypatch, arch):
    import safetensors

    path = checkpoint(tmp_path_factory, arch)
    full = dict(load_model(path, torch.float32, "cpu").named_parameters())
    monkeypatch.setattr(safetensors, "safe_open", _ReadRecorder(safetensors.safe_open, reads := {}))
    for rank in range(2):
        reads.clear()
        shard = dict(
            load_model(path, torch.float32, "cpu", tp=TPGroup(rank=rank, size=2, device="cpu")).named_parameters()
        )
        expert_reads = {name: shapes for name, shapes in reads.items() if ".experts." in name}
        assert expert_reads
        for name, shapes in expert_reads.items():  # gate/up [I, H] -> [I/2, H]; down [H, I] -> [H, I/2]
            down = name.endswith(("w2.weight", "down_proj.weight"))
            assert shapes == ([(HIDDEN, EXPERT_I // 2)] if down else [(EXPERT_I // 2, HIDDEN)]), name
        for name, param in shard.items():
            if name.endswith("experts.w13_weight"):
                ref, i = full[name], param.shape[1] // 2
                torch.testing.assert_close(param[:, :i], ref[:, rank * i : (rank + 1) * i], rtol=0, atol=0)
                torch.testing.assert_close(
                    param[:, i:], ref[:, 2 * i + rank * i : 2 * i + (rank + 1) * i], rtol=0, atol=0
                )
            elif name.endswith("experts.w2_weight"):
                i = param.shape[2]
                torch.testing.assert_close(param, full[name][:, :, rank * i : (rank + 1) * i], rtol=0, atol=0)
            elif name.endswith("mlp.gate.weight"):  # the router is replicated
                torch.testing.assert_close(param, full[name], rtol=0, atol=0)


def test_stacked_expert_layout_shards_like_per_expert_tensors(tmp_path_factory, tmp_path):
    """transformers 5's stacked layout (experts.gate_up_proj [E, 2I, H]) gives each rank the same shard."""
    from model_fixtures import _hf_model
    from safetensors.torch import save_file

    moe_path = checkpoint(tmp_path_factory, "qwen3_moe")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{moe_path}/{name}", tmp_path / name)
    state = {k: v.contiguous() for k, v in _hf_model(moe_path).state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    tp = TPGroup(rank=1, size=2, device="cpu")
    stacked, per_expert = (
        load_model(str(tmp_path), torch.float32, "cpu", tp=tp),
        load_model(moe_path, torch.float32, "cpu", tp=tp),
    )
    for (name, a), b in zip(stacked.named_parameters(), per_expert.parameters()):
        assert torch.equal(a, b), name


def test_dummy_weights_keep_the_router_replicated(tmp_path_factory):
    path = checkpoint(tmp_path_factory, "qwen3_moe")
    ranks = [
        dict(
            load_model(
                path, torch.float32, "cpu", "dummy", seed=3, tp=TPGroup(rank=r, size=2, device="cpu")
            ).named_parameters()
        )
        for r in range(2)
    ]
    router, experts = "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.w13_weight"
    assert ranks[0][router].abs().max() > 0 and torch.equal(ranks[0][router], ranks[1][router])
    assert not torch.equal(ranks[0][experts], ranks[1][experts])  # shards are drawn per rank


def test_experts_that_do_not_split_fail_start_up_in_one_line(tmp_path_factory, tmp_path):
    moe_path = checkpoint(tmp_path_factory, "qwen3_moe")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{moe_path}/{name}", tmp_path / name)
    config = json.loads(open(f"{moe_path}/config.json").read())
    (tmp_path / "config.json").write_text(json.dumps({**config, "moe_intermediate_size": 30}))
    with pytest.raises(ValueError, match=r"^--tp-size 4 does not divide the experts' intermediate size 30$"):
        Engine(str(tmp_path), device="cpu", tp_size=4)


@pytest.mark.slow
def test_a_script_that_never_shuts_down_its_tp_engine_still_exits(tmp_path_factory):
    """The benchmarks' use: an MoE model on dummy weights at tp=2 generates; the script ends without
    Engine.shutdown() and exits at once, its worker rank gone (multiprocessing would otherwise wait on it)."""
    import subprocess
    import sys
    import time

    from server_fixtures import pid_alive

    path = checkpoint(tmp_path_factory, "qwen3_moe")
    script = (
        "import json, sys\n"
        "from sgl_runtime.engine import Engine\n"
        "e = Engine(sys.argv[1], device='cpu', tp_size=2, load_format='dummy', max_total_tokens=1024)\n"
        "out = e.generate(input_ids=[[1, 2, 3]], sampling_params={'max_new_tokens': 3, 'ignore_eos': True})\n"
        "print(json.dumps({'tokens': out[0]['meta_info']['completion_tokens'],"
        " 'workers': [p.pid for p in e.workers.processes.values()]}))\n"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tokens"] == 3 and time.monotonic() - started < 240
    assert result["workers"] and not [pid for pid in result["workers"] if pid_alive(pid)]
