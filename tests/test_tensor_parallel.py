"""Tensor parallelism on the CPU (gloo): tp=2 engines (this process is rank 0, one spawned worker rank)
give the same greedy tokens as tp=1 for tiny random Llama, Qwen2 (one KV head, replicated on both
ranks) and Qwen3 checkpoints, on 16 prompts with radix-cache hits, chunked prefill, a regex constraint
with jump-forward and logprobs; and sharded loading puts exactly each rank's part of every weight in place."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import random_prompts
from model_fixtures import make_tiny_checkpoint
from tp_harness import assert_cache_hits_and_jump_forward, assert_logprobs_match, assert_tokens_equal, runs_by_tp

from sgl_runtime.distributed.parallel_state import TPGroup
from sgl_runtime.engine import Engine
from sgl_runtime.model_loader.loader import load_model

# name -> overrides of the tiny recipe; the Qwen2 one has fewer KV heads than ranks.
ARCHS = {"llama3": {}, "qwen2": {"num_key_value_heads": 1}, "qwen3": {}}


def _workload() -> tuple[list[list[int]], list[list[int]]]:
    """Two rounds of 8 prompts: the second extends the first's prompts (radix-cache hits); prompts of
    40 tokens are prefilled in 16-token chunks."""
    first = random_prompts([40, 9, 23, 5, 31, 12, 7, 18], seed=7)
    tails = random_prompts([3, 6, 2, 5, 4, 8, 1, 3], seed=8)
    return first, [p + t for p, t in zip(first, tails)]


@pytest.fixture(scope="module", params=list(ARCHS))
def runs(request, tmp_path_factory) -> dict[int, dict]:
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(f"tp-{request.param}"), **ARCHS[request.param])
    return runs_by_tp(path, *_workload())


def test_tp2_greedy_tokens_equal_tp1(runs):
    assert_tokens_equal(runs)


def test_the_workload_hits_the_cache_and_jumps_forward(runs):
    assert_cache_hits_and_jump_forward(runs)


def test_tp2_logprobs_match_tp1_in_fp32(runs):
    assert_logprobs_match(runs)


@pytest.mark.parametrize("kv_heads,vocab", [(2, 151936), (1, 151937)])
def test_each_rank_loads_exactly_its_shard(tmp_path, kv_heads, vocab):
    """No collectives needed to load: rank r's parameters are the rows/columns of the full weights that
    Megatron's split gives it (KV heads replicated when fewer than ranks; an odd vocabulary padded), read
    from safetensors slices."""
    path = make_tiny_checkpoint("qwen2", tmp_path, num_key_value_heads=kv_heads, vocab_size=vocab)
    full = dict(load_model(path, torch.float32, "cpu").named_parameters())
    shards = [
        dict(load_model(path, torch.float32, "cpu", tp=TPGroup(rank=r, size=2, device="cpu")).named_parameters())
        for r in range(2)
    ]
    attn = "model.layers.0.self_attn"
    q, kv = 2 * 16, kv_heads * 16  # 4 heads of head_dim 16 per 64 hidden; per rank: 2 query heads
    for rank, params in enumerate(shards):
        assert params["model.embed_tokens.weight"].shape[0] == -(-vocab // 2)
        qkv, ref = params[f"{attn}.qkv_proj.weight"], full[f"{attn}.qkv_proj.weight"]
        local_kv = 16 if kv_heads == 1 else kv // 2
        assert qkv.shape[0] == q + 2 * local_kv
        torch.testing.assert_close(qkv[:q], ref[rank * q : (rank + 1) * q], rtol=0, atol=0)
        k_first = 2 * q + (0 if kv_heads == 1 else rank * local_kv)  # full rows: q (64), then k
        torch.testing.assert_close(qkv[q : q + local_kv], ref[k_first : k_first + local_kv], rtol=0, atol=0)
        o = params[f"{attn}.o_proj.weight"]
        torch.testing.assert_close(o, full[f"{attn}.o_proj.weight"][:, rank * q : (rank + 1) * q], rtol=0, atol=0)
    for name in ("model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight"):
        dim = 1 if "down_proj" in name else 0
        joined = torch.cat([s[name] for s in shards], dim)
        torch.testing.assert_close(joined[: full[name].shape[0]], full[name], rtol=0, atol=0)
    if vocab % 2:  # rank 1's last row is padding
        assert not shards[1]["model.embed_tokens.weight"][-1].any()


def test_start_up_fails_in_one_line_when_the_model_does_not_split(tmp_path, capfd):
    from server_fixtures import free_port

    from sgl_runtime.launch_server import launch_server
    from sgl_runtime.server_args import ServerArgs

    path = make_tiny_checkpoint("llama3", tmp_path)  # 4 attention heads, 2 KV heads
    with pytest.raises(ValueError, match=r"^--tp-size 3 does not divide the model's 4 attention heads$"):
        Engine(path, device="cpu", tp_size=3)
    args = ServerArgs(model_path=path, device="cpu", tp_size=8, port=free_port())
    assert launch_server(args) == 1
    assert (
        "cannot start the server: --tp-size 8 does not divide the model's 4 attention heads" in capfd.readouterr().err
    )


def test_tp_size_must_fit_the_visible_gpus_and_the_flags_check_themselves():
    from sgl_runtime.distributed.layout import check_tp_fits, ranks_of_node
    from sgl_runtime.server_args import ServerArgs

    too_many = 2 * max(1, torch.cuda.device_count())
    with pytest.raises(ValueError, match=rf"--tp-size {too_many} needs {too_many} GPUs on this node, \d+ visible"):
        check_tp_fits(too_many, 1, 64, 8, 1024, "cuda")
    with pytest.raises(ValueError, match="one must divide the other"):
        check_tp_fits(4, 1, 12, 6, 128, "cpu")
    for bad in (
        dict(tp_size=3, nnodes=2),
        dict(nnodes=2, tp_size=2),
        dict(tp_size=2, node_rank=1),
        dict(tp_size=0),
        dict(tp_size=2, dist_init_addr="nohost"),
    ):
        with pytest.raises(ValueError):
            ServerArgs(**bad)
    assert list(ranks_of_node(8, 2, 1)) == [4, 5, 6, 7]


def test_the_frontend_passes_tensor_parallel_flags_through():
    from sgl_lang.backend.runtime import _cli_flags
    from sgl_runtime.server_args import parse_args

    flags = _cli_flags({"tp_size": 2, "nnodes": 2, "node_rank": 1, "dist_init_addr": "127.0.0.1:5000"})
    args = parse_args(flags)
    assert (args.tp_size, args.nnodes, args.node_rank, args.dist_init_addr) == (2, 2, 1, "127.0.0.1:5000")
