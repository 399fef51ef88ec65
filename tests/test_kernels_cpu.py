"""CPU-side pieces of the GPU path: importing the kernels needs no Triton, the CUDA-graph batch-size
ladder, the split-KV heuristic, and the torch references against plain SDPA."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from torch.nn import functional as F

from sgl_runtime.kernels.decode_attention import MAX_SPLITS, decode_attention_torch, num_splits_for
from sgl_runtime.kernels.extend_attention import extend_attention_torch
from sgl_runtime.kernels.fusion import use_fused_kernels
from sgl_runtime.kernels.rmsnorm import fused_add_rmsnorm_torch
from sgl_runtime.kernels.silu_and_mul import silu_and_mul_torch
from sgl_runtime.layers.activation import SiluAndMul
from sgl_runtime.layers.layernorm import RMSNorm
from sgl_runtime.layers.rotary_embedding import RotaryEmbedding
from sgl_runtime.model_executor.cuda_graph_runner import batch_size_ladder


def test_kernel_modules_import_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None; "
        "import sgl_runtime.kernels.store_kv, sgl_runtime.kernels.extend_attention, "
        "sgl_runtime.kernels.decode_attention, sgl_runtime.kernels.bitmask_triton, sgl_runtime.kernels.rmsnorm, "
        "sgl_runtime.kernels.rotary, sgl_runtime.layers.attention.triton_backend, "
        "sgl_runtime.model_executor.cuda_graph_runner, sgl_runtime.kernels.silu_and_mul, "
        "sgl_runtime.models.llama; from sgl_runtime.kernels import fusion; "
        "assert not fusion.fused_kernels_allowed()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_batch_size_ladder():
    assert batch_size_ladder(256)[:7] == [1, 2, 4, 8, 16, 24, 32]
    assert batch_size_ladder(256)[-5:] == [256, 320, 384, 448, 512]  # past 256: flattened extends only
    assert len(batch_size_ladder(256)) == 4 + 31 + 4
    assert batch_size_ladder(6) == [1, 2, 4, 6]
    assert batch_size_ladder(20) == [1, 2, 4, 8, 16, 20]
    assert batch_size_ladder(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 128]


def test_num_splits_bounds():
    assert num_splits_for(1, 8) == MAX_SPLITS
    assert num_splits_for(256, 8) == 2
    assert all(2 <= num_splits_for(b, h) <= MAX_SPLITS for b in range(1, 300, 7) for h in (1, 4, 8))


def test_references_match_sdpa():
    torch.manual_seed(0)
    k_buf, v_buf = torch.randn(50, 2, 16), torch.randn(50, 2, 16)
    table = torch.arange(50, dtype=torch.int32).flip(0).view(1, 50)
    q = torch.randn(7, 4, 16)  # a 7-token extend on a 13-token prefix
    out = extend_attention_torch(q, k_buf, v_buf, table, torch.tensor([0]), [20], [7], 0.25)
    slots = table[0, :20].long()
    k, v = k_buf[slots].repeat_interleave(2, 1), v_buf[slots].repeat_interleave(2, 1)  # [20, 4, 16]
    mask = torch.arange(20)[None, :] <= torch.arange(7)[:, None] + 13
    ref = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=0.25
    ).transpose(0, 1)
    torch.testing.assert_close(out, ref)
    dec = decode_attention_torch(q[-1:], k_buf, v_buf, table, torch.tensor([0]), [20], 0.25)
    torch.testing.assert_close(dec, out[-1:])


def test_fusion_switch_is_off_on_cpu_and_by_env():
    assert not use_fused_kernels(torch.zeros(2))
    code = (
        "from sgl_runtime.kernels import fusion; import sys; sys.exit(0 if not fusion.fused_kernels_allowed() else 1)"
    )
    env = {**os.environ, "SGL_DISABLE_FUSED_KERNELS": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_cpu_layers_are_the_exact_torch_code():
    """On CPU the residual-taking norm, the activation and in-place rotary equal the plain torch ops bit for bit."""
    torch.manual_seed(0)
    norm = RMSNorm(96, eps=1e-6)
    norm.weight.data = (torch.rand(96) + 0.5).bfloat16()
    x, residual = torch.randn(5, 96).bfloat16(), torch.randn(5, 96).bfloat16()
    out, new_residual = norm(x, residual)
    ref, ref_residual = fused_add_rmsnorm_torch(x, residual, norm.weight, 1e-6)
    assert torch.equal(out, ref) and torch.equal(new_residual, ref_residual)
    assert torch.equal(norm(residual + x), ref)
    gate_up = torch.randn(5, 400).bfloat16()
    assert torch.equal(SiluAndMul()(gate_up), silu_and_mul_torch(gate_up))
    rope = RotaryEmbedding(16, {"rope_theta": 10000.0})
    cos_sin = rope.cos_sin(torch.arange(5) * 7)
    qkv = torch.randn(5, 6 * 16)
    expected = rope.rotate(qkv[:, : 4 * 16], cos_sin)
    view = qkv[:, : 4 * 16].unflatten(-1, (4, 16))
    rope.rotate_(view, cos_sin)
    assert torch.equal(qkv[:, : 4 * 16], expected)
