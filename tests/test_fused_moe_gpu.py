"""GPU tests of the fused-MoE Triton kernel: against its torch reference over shapes, top-k values and
dtypes (every tile configuration of `block_config`), on tensor-parallel shards of the experts (each
rank's slice of the intermediate dimension, summed over the ranks), under CUDA-graph capture, and a
tiny Qwen3-MoE served on CUDA with greedy output equal to transformers' (skipped without CUDA).

SGL_KERNEL_TEST_DEVICE=cpu with TRITON_INTERPRET=1 runs the kernel comparisons on the CPU interpreter
(float16/float32 only: the interpreter's bfloat16 dot is not faithful).
"""

from __future__ import annotations

import os

import pytest
import torch
from engine_fixtures import checkpoint, hf_greedy, random_prompts
from model_fixtures import expert_shards

from sgl_runtime.kernels.fused_moe import block_config, fused_experts, fused_experts_torch
from sgl_runtime.layers.moe import select_experts

pytestmark = pytest.mark.gpu
DEVICE = os.environ.get("SGL_KERNEL_TEST_DEVICE", "cuda")
# (tokens, experts, top_k, hidden, intermediate): decode-sized to prefill-sized, Qwen3-30B-A3B and Mixtral shapes
SHAPES = [
    (1, 8, 2, 64, 32),
    (3, 128, 8, 2048, 768),
    (33, 8, 2, 256, 200),
    (256, 128, 8, 2048, 768),
    (700, 16, 4, 320, 96),
    (2048, 8, 2, 1024, 512),
    (4096, 128, 8, 2048, 768),
    (17, 60, 1, 128, 64),
    (40, 64, 4, 192, 80),
    (100, 128, 8, 2048, 768),
]
DTYPES = [torch.bfloat16, torch.float16, torch.float32] if DEVICE == "cuda" else [torch.float16, torch.float32]
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 3e-3, torch.float32: 1e-5}  # relative (Frobenius) error


def _inputs(tokens, experts, top_k, hidden, inter, dtype, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    logits = torch.randn(tokens, experts, generator=gen)
    return [t.to(DEVICE, dtype) for t in (x, w13, w2)] + [logits.to(DEVICE)]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-6)).item()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_moe_matches_reference(shape, dtype):
    tokens, _, top_k, hidden, _ = shape
    x, w13, w2, logits = _inputs(*shape, dtype)
    weights, ids = select_experts(logits, top_k, renormalize=top_k > 1)
    out = fused_experts(x, w13, w2, weights, ids)
    ref = fused_experts_torch(x, w13, w2, weights, ids)
    assert out.shape == ref.shape == (tokens, hidden) and out.dtype == dtype
    assert _rel_err(out, ref) < TOLERANCE[dtype], _rel_err(out, ref)


@pytest.mark.parametrize("tp_size", [2, 4, 8])
@pytest.mark.parametrize("tokens", [3, 256, 2048])
def test_fused_moe_on_tensor_parallel_shards(tokens, tp_size):
    """Qwen3-30B-A3B's experts (768 intermediate) split over tp_size ranks (384 down to 96 per rank): the
    kernel on each rank's shard, summed as the all-reduce does, equals the whole experts' reference."""
    x, w13, w2, logits = _inputs(tokens, 128, 8, 2048, 768, torch.float32)
    weights, ids = select_experts(logits, 8, renormalize=True)
    shards = expert_shards(w13, w2, tp_size)
    assert shards[0][0].shape == (128, 2 * 768 // tp_size, 2048) and shards[0][0].is_contiguous()
    out = sum(fused_experts(x, a, b, weights, ids) for a, b in shards)
    assert _rel_err(out, fused_experts_torch(x, w13, w2, weights, ids)) < TOLERANCE[torch.float32]


def test_shapes_cover_every_tile_configuration():
    configs = {block_config(t * k, e)["BLOCK_M"] for t, e, k, _, _ in SHAPES}
    assert configs == {16, 32, 64}


def test_no_tokens():
    x, w13, w2, logits = _inputs(0, 8, 2, 64, 32, torch.float32)
    weights, ids = select_experts(logits, 2, True)
    assert fused_experts(x, w13, w2, weights, ids).shape == (0, 64)


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need CUDA")
def test_fused_moe_replays_in_a_cuda_graph_with_new_routing():
    x, w13, w2, logits = _inputs(64, 128, 8, 512, 256, torch.bfloat16)
    static_x, static_logits = x.clone(), logits.clone()

    def step():
        weights, ids = select_experts(static_logits, 8, True)
        return fused_experts(static_x, w13, w2, weights, ids)

    step()  # compile outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    for seed in (1, 2):
        new_x, _, _, new_logits = _inputs(64, 128, 8, 512, 256, torch.bfloat16, seed=seed)
        static_x.copy_(new_x)
        static_logits.copy_(new_logits)
        graph.replay()
        weights, ids = select_experts(new_logits, 8, True)
        assert _rel_err(static_out, fused_experts_torch(new_x, w13, w2, weights, ids)) < 2e-2


@pytest.mark.skipif(DEVICE != "cuda", reason="the engine test needs CUDA")
@pytest.mark.parametrize("extra", [{}, {"disable_cuda_graph": True}])
def test_tiny_qwen3_moe_on_cuda_matches_transformers(tmp_path_factory, extra):
    from sgl_runtime.engine import Engine

    path = checkpoint(tmp_path_factory, "qwen3_moe")
    prompts = random_prompts((3, 40, 9, 129, 1), seed=52)
    params = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
    engine = Engine(path, device="cuda", dtype="float32", max_total_tokens=4096, **extra)
    try:
        results = engine.generate(input_ids=prompts, sampling_params=params)
    finally:
        engine.shutdown()
    assert [r["output_ids"] for r in results] == [hf_greedy(path, p, 12) for p in prompts]


@pytest.mark.skipif(DEVICE != "cuda", reason="the engine test needs CUDA")
def test_torch_moe_path_captures_in_cuda_graphs(tmp_path_factory, monkeypatch):
    """With the fused kernels disabled the torch path runs inside the captured decode graphs (dense form)."""
    from sgl_runtime.engine import Engine
    from sgl_runtime.kernels import fusion

    path = checkpoint(tmp_path_factory, "qwen3_moe")
    prompts = random_prompts((3, 40, 9), seed=53)
    params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    monkeypatch.setenv(fusion.DISABLE_ENV, "1")
    fusion.fused_kernels_allowed.cache_clear()
    try:
        engine = Engine(path, device="cuda", dtype="float32", max_total_tokens=4096)
        results = engine.generate(input_ids=prompts, sampling_params=params)
        engine.shutdown()
    finally:
        monkeypatch.delenv(fusion.DISABLE_ENV)
        fusion.fused_kernels_allowed.cache_clear()
    assert [r["output_ids"] for r in results] == [hf_greedy(path, p, 8) for p in prompts]
