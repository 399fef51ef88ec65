"""Tensor parallelism on the CPU (gloo): tp=2 engines (this process is rank 0, one spawned worker rank)
give the same greedy tokens as tp=1 for tiny random Llama, Qwen2 (one KV head, replicated on both
ranks) and Qwen3 checkpoints, on 16 prompts with radix-cache hits, chunked prefill, a regex constraint
with jump-forward and logprobs; and sharded loading puts exactly each rank's part of every weight in place."""

from __future__ import annotations

import re

import pytest
import torch
from engine_fixtures import random_prompts
from model_fixtures import make_tiny_checkpoint

from sgl_runtime.distributed.parallel_state import TPGroup
from sgl_runtime.engine import Engine
from sgl_runtime.model_loader.loader import load_model

# name -> overrides of the tiny recipe; the Qwen2 one has fewer KV heads than ranks.
ARCHS = {"llama3": {}, "qwen2": {"num_key_value_heads": 1}, "qwen3": {}}
REGEX = r"(yes|no), because [a-z]{2,6}\."
GREEDY = {"max_new_tokens": 6, "temperature": 0}
LOGPROB_ATOL = 1e-4


def _workload() -> tuple[list[list[int]], list[list[int]]]:
    """Two rounds of 8 prompts: the second extends the first's prompts (radix-cache hits); prompts of
    40 tokens are prefilled in 16-token chunks."""
    first = random_prompts([40, 9, 23, 5, 31, 12, 7, 18], seed=7)
    tails = random_prompts([3, 6, 2, 5, 4, 8, 1, 3], seed=8)
    return first, [p + t for p, t in zip(first, tails)]


def _run(path: str, tp_size: int) -> dict:
    first, second = _workload()
    with Engine(path, device="cpu", tp_size=tp_size, max_total_tokens=4096, chunked_prefill_size=16) as engine:
        out = {"first": engine.generate(input_ids=first, sampling_params=GREEDY)}
        params = [dict(GREEDY)] * 6 + [{"max_new_tokens": 16, "temperature": 0, "regex": REGEX}] * 2
        out["second"] = engine.generate(input_ids=second, sampling_params=params)
        out["logprobs"] = engine.generate(
            input_ids=first[:2], sampling_params=GREEDY, return_logprob=True, logprob_start_len=0, top_logprobs_num=3
        )
    return out


@pytest.fixture(scope="module", params=list(ARCHS))
def runs(request, tmp_path_factory) -> dict[int, dict]:
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(f"tp-{request.param}"), **ARCHS[request.param])
    return {tp: _run(path, tp) for tp in (1, 2)}


def test_tp2_greedy_tokens_equal_tp1(runs):
    for round_ in ("first", "second", "logprobs"):
        assert [r["output_ids"] for r in runs[2][round_]] == [r["output_ids"] for r in runs[1][round_]], round_


def test_the_workload_hits_the_cache_and_jumps_forward(runs):
    for tp in (1, 2):
        second = runs[tp]["second"]
        assert all(r["meta_info"]["cached_tokens"] > 0 for r in second), tp
        for constrained in second[6:]:
            assert re.fullmatch(REGEX, constrained["text"]), constrained["text"]
            meta = constrained["meta_info"]
            assert meta["forward_passes"] < meta["completion_tokens"], meta  # ", because " was jumped over


def test_tp2_logprobs_match_tp1_in_fp32(runs):
    for ours, ref in zip(runs[2]["logprobs"], runs[1]["logprobs"]):
        for key in ("input_token_logprobs", "output_token_logprobs"):
            got = [e[0] for e in ours["meta_info"][key] if e[0] is not None]
            want = [e[0] for e in ref["meta_info"][key] if e[0] is not None]
            assert len(got) == len(want) > 0
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=LOGPROB_ATOL, rtol=0)
        top = [[e[0] for e in t] for t in ours["meta_info"]["output_top_logprobs"]]
        top_ref = [[e[0] for e in t] for t in ref["meta_info"]["output_top_logprobs"]]
        torch.testing.assert_close(torch.tensor(top), torch.tensor(top_ref), atol=LOGPROB_ATOL, rtol=0)


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
