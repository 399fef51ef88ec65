"""Mixture of experts on the CPU: routing and the experts' reference path against transformers' own
Qwen3-MoE and Mixtral modules, tiny random checkpoints loaded through the real loader matched layer by
layer, greedy generation through the Engine, the expert weight loader's error paths and dummy weights."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import checkpoint, hf_greedy, random_prompts
from layer_compare import assert_layers_match
from model_fixtures import make_tiny_checkpoint

from sgl_runtime.kernels.fused_moe import align_by_expert, dense_experts_torch, fused_experts_torch
from sgl_runtime.layers.moe import select_experts
from sgl_runtime.model_loader.loader import load_model

PROMPT = [(7919 * i + 13) % 150000 for i in range(23)]


def _qwen3_moe_config(**overrides):
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        **{
            **dict(
                hidden_size=32,
                num_experts=8,
                num_experts_per_tok=3,
                moe_intermediate_size=16,
                num_attention_heads=4,
                head_dim=8,
            ),
            **overrides,
        }
    )


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_routing_matches_qwen3_moe_router(norm_topk_prob):
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    router = Qwen3MoeTopKRouter(_qwen3_moe_config(norm_topk_prob=norm_topk_prob))
    torch.nn.init.normal_(router.weight)
    x = torch.randn(19, 32)
    logits, ref_weights, ref_ids = router(x)
    weights, ids = select_experts(logits, 3, renormalize=norm_topk_prob)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_weights.float())
    assert torch.allclose(weights.sum(-1), torch.ones(19)) == norm_topk_prob


def test_routing_matches_mixtral_router():
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    router = MixtralTopKRouter(MixtralConfig(hidden_size=32, num_local_experts=6, num_experts_per_tok=2))
    torch.nn.init.normal_(router.weight)
    logits, ref_weights, ref_ids = router(torch.randn(11, 32))
    weights, ids = select_experts(logits, 2, renormalize=True)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_weights)


def test_reference_experts_match_transformers_experts():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    experts = Qwen3MoeExperts(_qwen3_moe_config())
    torch.nn.init.normal_(experts.gate_up_proj, std=0.2)
    torch.nn.init.normal_(experts.down_proj, std=0.2)
    x = torch.randn(17, 32)
    weights, ids = select_experts(torch.randn(17, 8), 3, renormalize=False)
    expected = experts(x, ids, weights)
    ours = fused_experts_torch(x, experts.gate_up_proj.data, experts.down_proj.data, weights, ids)
    assert expected.abs().max() > 0.1
    torch.testing.assert_close(ours, expected)
    # the graph-capturable dense form (every expert, unrouted ones weighted 0) gives the same sum
    torch.testing.assert_close(
        dense_experts_torch(x, experts.gate_up_proj.data, experts.down_proj.data, weights, ids), expected
    )


@pytest.mark.parametrize(
    "tokens,experts,top_k,block_m", [(1, 8, 2, 16), (37, 8, 2, 16), (50, 128, 8, 16), (300, 16, 4, 64), (5, 4, 4, 32)]
)
def test_align_by_expert_groups_every_row_once_in_single_expert_blocks(tokens, experts, top_k, block_m):
    topk_ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])  # distinct per token
    sorted_ids, block_experts, rows_used = align_by_expert(topk_ids, experts, block_m)
    n, used = tokens * top_k, int(rows_used)
    assert used % block_m == 0 and used <= sorted_ids.numel() and sorted_ids.numel() % block_m == 0
    real = sorted_ids[:used][sorted_ids[:used] < n]
    assert sorted(real.tolist()) == list(range(n))  # every (token, slot) row exactly once
    assert torch.all(sorted_ids[used:] == n)  # nothing real beyond the used blocks
    flat = topk_ids.reshape(-1)
    for block in range(used // block_m):
        rows = sorted_ids[block * block_m : (block + 1) * block_m]
        rows = rows[rows < n]
        assert len(rows) > 0 and torch.all(flat[rows] == block_experts[block])


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral"])
def moe_path(request, tmp_path_factory):
    return checkpoint(tmp_path_factory, request.param)


def test_moe_checkpoint_matches_transformers_per_layer(moe_path):
    assert_layers_match(moe_path, PROMPT)


def test_qwen3_moe_without_topk_renormalization_and_sparse_step(tmp_path):
    path = make_tiny_checkpoint(
        "qwen3_moe", tmp_path, norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[], num_experts_per_tok=3
    )
    model = load_model(path, torch.float32, "cpu")
    assert [type(layer.mlp).__name__ for layer in model.model.layers] == ["LlamaMLP", "SparseMoeBlock", "LlamaMLP"]
    assert model.model.layers[1].mlp.experts.renormalize is False
    assert_layers_match(path, PROMPT)


def test_greedy_generation_through_the_engine_matches_transformers(moe_path):
    from sgl_runtime.engine import Engine

    prompts = random_prompts((5, 14, 1), seed=7)
    params = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
    engine = Engine(moe_path, device="cpu", max_total_tokens=1024)
    try:
        results = engine.generate(input_ids=prompts, sampling_params=params)
    finally:
        engine.shutdown()
    assert [r["output_ids"] for r in results] == [hf_greedy(moe_path, p, 6) for p in prompts]


def test_transformers_fused_expert_layout_loads_the_same(tmp_path_factory, tmp_path):
    """Checkpoints in transformers 5's in-memory layout (experts.gate_up_proj [E, 2I, H]) load too."""
    import shutil

    from model_fixtures import _hf_model
    from safetensors.torch import save_file

    moe_path = checkpoint(tmp_path_factory, "qwen3_moe")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{moe_path}/{name}", tmp_path / name)
    state = {k: v.contiguous() for k, v in _hf_model(moe_path).state_dict().items()}
    assert any(k.endswith("experts.gate_up_proj") for k in state)
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    fused, per_expert = load_model(str(tmp_path), torch.float32, "cpu"), load_model(moe_path, torch.float32, "cpu")
    for (name, a), b in zip(fused.named_parameters(), per_expert.parameters()):
        assert torch.equal(a, b), name


def test_checkpoint_missing_one_expert_names_the_parameter(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_tiny_checkpoint("mixtral", tmp_path)
    tensors = load_file(f"{path}/model.safetensors")
    del tensors["model.layers.1.block_sparse_moe.experts.3.w3.weight"]
    save_file(tensors, f"{path}/model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks weights for 1 parameters: model.layers.1.mlp.experts.w13_weight$"):
        load_model(path, torch.float32, "cpu")


def test_expert_weight_of_the_wrong_shape_is_a_clear_error(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_tiny_checkpoint("qwen3_moe", tmp_path)
    tensors = load_file(f"{path}/model.safetensors")
    tensors["model.layers.0.mlp.experts.2.down_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, f"{path}/model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"expert 2 down weight has shape \(3, 3\), expected \(64, 32\)"):
        load_model(path, torch.float32, "cpu")


def test_dummy_weights_fill_the_experts(moe_path):
    model = load_model(moe_path, torch.float32, "cpu", load_format="dummy", seed=1)
    experts = [m for m in model.modules() if type(m).__name__ == "FusedMoE"]
    assert experts
    for module in experts:
        for param in (module.w13_weight, module.w2_weight):
            assert 0 < param.abs().max() <= 0.02 and param.std() > 0.005
    from model_fixtures import ForwardHarness

    harness = ForwardHarness(model)
    logits = harness.run_forward([(harness.new_request(), 0, PROMPT)])[0]
    assert torch.isfinite(logits).all()


def test_qwen3_30b_a3b_benchmark_shape_serves_with_dummy_weights(monkeypatch):
    """offline_throughput's --model-config qwen3-30b-a3b, shrunk by --tiny: built, dummy-loaded and served."""
    import importlib
    import json
    import shutil
    import sys
    from pathlib import Path

    from sgl_runtime.engine import Engine

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench_utils = importlib.import_module("bench_utils")
    model_dir = bench_utils.make_model_dir("qwen3-30b-a3b", tiny=True)
    try:
        config = json.loads(Path(model_dir, "config.json").read_text())
        assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["num_experts"] == 8
        engine = Engine(model_path=model_dir, load_format="dummy", device="cpu", max_total_tokens=2048)
        out = engine.generate(input_ids=[[1000, 2000, 3000]], sampling_params={"max_new_tokens": 4, "ignore_eos": True})
        engine.shutdown()
        assert out[0]["meta_info"]["completion_tokens"] == 4
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
        sys.modules.pop("bench_utils", None)
