"""Cascade (shared-prefix) decode attention on CUDA (skipped without it): the Triton kernels against
plain attention, eagerly and through a graph's static buffers, and greedy engine output with the
cascade on (CUDA graphs and eager) equal to it off and to transformers'."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import checkpoint, hf_greedy, random_prompts
from test_cascade_attention import CASES, shared_pool

from sgl_runtime.engine import Engine
from sgl_runtime.kernels.cascade_attention import shared_prefix_attention
from sgl_runtime.kernels.decode_attention import DecodeWorkspace, decode_attention, decode_attention_torch
from sgl_runtime.layers.attention.cascade_metadata import CascadePlanner

pytestmark = pytest.mark.gpu
DEVICE = "cuda"

LARGE = (  # 3 groups of 16 on a 2,048-token prefix (the benchmark's shape), 2 of 5 on 700, 6 alone
    [2048 + 1 + (37 * i) % 300 for i in range(48)] + [700 + 3 * i for i in range(1, 11)] + [50 + i for i in range(6)],
    [(2048, list(range(g * 16, g * 16 + 16))) for g in range(3)] + [(700, list(range(48, 53))), (700, [53, 54])],
)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-6)).item()


def _cases():
    for name, (lens, shares, groups) in CASES.items():
        yield name, lens, shares, shares[-1:] if groups is None else groups
    lens, shares = LARGE
    yield "large", lens, shares, shares


@pytest.mark.parametrize("heads,kv_heads", [(32, 8), (28, 4), (8, 8), (16, 1)])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cascade_kernels_match_plain_attention(heads, kv_heads, dim, dtype):
    for name, lens, shares, groups in _cases():
        k_buf, v_buf, table = shared_pool(lens, shares, kv_heads, dim)
        k_buf, v_buf, table = k_buf.to(DEVICE, dtype), v_buf.to(DEVICE, dtype), table.to(DEVICE)
        q = torch.randn(len(lens), heads, dim, device=DEVICE).to(dtype)
        rows, seq_lens = torch.arange(len(lens), device=DEVICE), torch.tensor(lens, device=DEVICE)
        ref = decode_attention_torch(q, k_buf, v_buf, table, rows, lens, dim**-0.5)
        planner = CascadePlanner(heads, kv_heads, DEVICE, 128)
        workspace = DecodeWorkspace(128, heads, dim, DEVICE, cascade=True)
        plain = torch.empty_like(q)
        decode_attention(q, plain, k_buf, v_buf, table, rows, seq_lens, workspace, 2, dim**-0.5)
        for mode in ("eager", "graph"):
            if mode == "eager":
                tensors = planner.eager(groups, len(lens))
                if tensors is None:
                    assert not groups
                    continue
            else:
                tensors = planner.static(128)
                planner.fill(groups, len(lens), 128)
            for splits in (2, 8):
                out = torch.full_like(q, float("nan"))
                shared_prefix_attention(
                    q, k_buf, v_buf, table, rows, tensors.chunk_prefix, tensors.chunk_members, workspace, dim**-0.5
                )
                decode_attention(
                    q,
                    out,
                    k_buf,
                    v_buf,
                    table,
                    rows,
                    seq_lens,
                    workspace,
                    splits,
                    dim**-0.5,
                    kv_start=tensors.kv_start[: len(lens)],
                )
                assert not out.isnan().any(), (name, mode, splits)
                assert _rel_err(out, ref) < 1e-2, (name, mode, splits)
                assert _rel_err(out, plain) < 1e-2, (name, mode, splits)


GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return checkpoint(tmp_path_factory, "llama3")


@pytest.mark.parametrize("extra", [{}, {"disable_cuda_graph": True}])
def test_cuda_greedy_output_with_cascade_equals_without(model_path, extra):
    """24 requests (12 and 8 on two shared prompts, 4 alone), submitted together: decode batches of 24
    (a 24-row graph, above GRAPH_MIN_BATCH) run the cascade launches, and the output is unchanged."""
    shared_a, shared_b, *tails = random_prompts((300, 150) + (3,) * 24, seed=61)
    prompts = [shared_a + t for t in tails[:12]] + [shared_b + t for t in tails[12:20]] + tails[20:]
    kwargs = dict(device="cuda", dtype="float32", max_total_tokens=8192, **extra)
    engine = Engine(model_path, **kwargs)
    planner = engine.scheduler.model_runner.attn_backend.planner
    used = []
    for name in ("eager", "fill"):
        real = getattr(planner, name)
        setattr(planner, name, lambda groups, *a, _real=real: used.append(bool(groups)) or _real(groups, *a))
    outputs = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=GREEDY)]
    assert any(used), "no decode batch took the cascade path"
    engine.shutdown()
    plain = Engine(model_path, disable_cascade_attention=True, **kwargs)
    assert plain.scheduler.model_runner.attn_backend.planner is None
    assert [r["output_ids"] for r in plain.generate(input_ids=prompts, sampling_params=GREEDY)] == outputs
    plain.shutdown()
    for i in (0, 12):
        assert outputs[i] == hf_greedy(model_path, prompts[i], GREEDY["max_new_tokens"])
