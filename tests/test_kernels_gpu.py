"""GPU tests: each Triton kernel against its torch reference, the Triton backend against the torch
backend on full-model logits, and CUDA-graph decode against eager decode (skipped without CUDA).

SGL_KERNEL_TEST_DEVICE=cpu with TRITON_INTERPRET=1 runs the kernel tests on the CPU interpreter.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil

import pytest
import torch

from sgl_runtime.constrained.bitmask import apply_token_bitmask_torch_
from sgl_runtime.kernels import bitmask_triton, fusion
from sgl_runtime.kernels.decode_attention import (
    DecodeWorkspace,
    decode_attention,
    decode_attention_torch,
    num_splits_for,
)
from sgl_runtime.kernels.extend_attention import extend_attention, extend_attention_torch
from sgl_runtime.kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_torch, rmsnorm, rmsnorm_torch
from sgl_runtime.kernels.rotary import apply_rotary, apply_rotary_, apply_rotary_torch
from sgl_runtime.kernels.silu_and_mul import silu_and_mul, silu_and_mul_torch
from sgl_runtime.kernels.store_kv import store_kv, store_kv_torch

pytestmark = pytest.mark.gpu
DEVICE = os.environ.get("SGL_KERNEL_TEST_DEVICE", "cuda")
HEAD_CONFIGS = [(8, 8), (16, 4), (32, 4)]  # GQA ratios 1, 4, 8
PREFIX_LENS = [0, 1, 37, 1024, 3500]
EXTEND_LENS = [64, 1, 200, 17, 129]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-6)).item()


def _ragged_pool(seq_lens, kv_heads, dim, dtype, seed=0):
    """K/V buffers with one dummy slot and a req_to_token table scattering each request's keys."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(seq_lens) + 64
    k_buf = torch.randn(total + 1, kv_heads, dim, generator=gen).to(DEVICE, dtype)
    v_buf = torch.randn(total + 1, kv_heads, dim, generator=gen).to(DEVICE, dtype)
    rows = torch.randperm(len(seq_lens) + 3, generator=gen)[: len(seq_lens)]
    table = torch.zeros(len(seq_lens) + 3, max(seq_lens) + 8, dtype=torch.int32)
    slots = torch.randperm(total, generator=gen)
    offset = 0
    for row, seq_len in zip(rows.tolist(), seq_lens):
        table[row, :seq_len] = slots[offset : offset + seq_len].int()
        offset += seq_len
    return k_buf, v_buf, table.to(DEVICE), rows.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_store_kv_matches_reference(dtype):
    k_buf = torch.randn(1001, 4, 128, device=DEVICE).to(dtype)
    v_buf = torch.randn_like(k_buf)
    ref_k, ref_v = k_buf.clone(), v_buf.clone()
    loc = torch.randperm(1000, device=DEVICE)[:333]
    k = torch.randn(333, 4, 128, device=DEVICE).to(dtype)
    v = torch.randn_like(k)
    store_kv(k_buf, v_buf, loc, k, v)
    store_kv_torch(ref_k, ref_v, loc, k, v)
    assert torch.equal(k_buf, ref_k) and torch.equal(v_buf, ref_v)


@pytest.mark.parametrize("heads,kv_heads", HEAD_CONFIGS)
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_extend_attention_matches_reference(heads, kv_heads, dim, dtype):
    seq_lens = [p + e for p, e in zip(PREFIX_LENS, EXTEND_LENS)]
    k_buf, v_buf, table, rows = _ragged_pool(seq_lens, kv_heads, dim, dtype)
    q = torch.randn(sum(EXTEND_LENS), heads, dim, device=DEVICE).to(dtype)
    out = torch.full_like(q, float("nan"))
    starts = torch.tensor([0] + EXTEND_LENS[:-1], device=DEVICE).cumsum(0)
    extend_attention(
        q,
        out,
        k_buf,
        v_buf,
        table,
        rows,
        torch.tensor(seq_lens, device=DEVICE),
        torch.tensor(EXTEND_LENS, device=DEVICE),
        starts,
        max(EXTEND_LENS),
        dim**-0.5,
    )
    ref = extend_attention_torch(q, k_buf, v_buf, table, rows, seq_lens, EXTEND_LENS, dim**-0.5)
    assert not out.isnan().any()
    assert _rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("heads,kv_heads", HEAD_CONFIGS)
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_attention_matches_reference(heads, kv_heads, dim, dtype):
    seq_lens = [1, 2, 63, 64, 65, 1000, 4097, 333]
    k_buf, v_buf, table, rows = _ragged_pool(seq_lens, kv_heads, dim, dtype, seed=1)
    q = torch.randn(len(seq_lens), heads, dim, device=DEVICE).to(dtype)
    ref = decode_attention_torch(q, k_buf, v_buf, table, rows, seq_lens, dim**-0.5)
    workspace = DecodeWorkspace(16, heads, dim, DEVICE)
    for splits in sorted({2, num_splits_for(len(seq_lens), kv_heads), 32}):
        out = torch.full_like(q, float("nan"))
        decode_attention(
            q, out, k_buf, v_buf, table, rows, torch.tensor(seq_lens, device=DEVICE), workspace, splits, dim**-0.5
        )
        assert not out.isnan().any(), splits
        assert _rel_err(out, ref) < 1e-2, splits


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """The same values in a view whose data pointer is not 16-byte aligned (a slice of a staging buffer)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:]
    view.copy_(t)
    assert view.data_ptr() % 16 != 0
    return view


def _variants(kernel) -> int:
    """Compiled specializations of a Triton JITFunction (Triton >= 3.x keeps them per device)."""
    return sum(len(caches[0]) for caches in kernel.device_caches.values())


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="the interpreter compiles nothing")
def test_index_tensor_alignment_and_split_count_compile_no_new_variants():
    """Index tensors arrive as slices of a staging buffer or the slot free list at any alignment, and the
    split count follows the batch: neither may compile a kernel again (a second or so, mid-request)."""
    from sgl_runtime.kernels import decode_attention as decode_mod
    from sgl_runtime.kernels import extend_attention as extend_mod
    from sgl_runtime.kernels import store_kv as store_mod

    dtype, heads, kv_heads, dim = torch.bfloat16, 12, 3, 64
    k_buf = torch.randn(2001, kv_heads, dim, device=DEVICE).to(dtype)
    v_buf = torch.randn_like(k_buf)
    loc = torch.randperm(2000, device=DEVICE)[:77]
    k, v = (
        torch.randn(77, kv_heads, dim, device=DEVICE).to(dtype),
        torch.randn(77, kv_heads, dim, device=DEVICE).to(dtype),
    )
    store_kv(k_buf, v_buf, loc, k, v)
    before = _variants(store_mod._kernel())
    store_kv(k_buf, v_buf, _misaligned(loc), k, v)
    assert _variants(store_mod._kernel()) == before

    seq_lens, ext_lens = [40, 300, 9], [40, 100, 1]
    k_buf, v_buf, table, rows = _ragged_pool(seq_lens, kv_heads, dim, dtype, seed=3)
    q = torch.randn(sum(ext_lens), heads, dim, device=DEVICE).to(dtype)
    meta = [
        rows,
        torch.tensor(seq_lens, device=DEVICE),
        torch.tensor(ext_lens, device=DEVICE),
        torch.tensor([0, 40, 140], device=DEVICE),
    ]
    out = torch.empty_like(q)
    extend_attention(q, out, k_buf, v_buf, table, *meta, max(ext_lens), dim**-0.5)
    before = _variants(extend_mod._kernel())
    extend_attention(q, out, k_buf, v_buf, table, *[_misaligned(m) for m in meta], max(ext_lens), dim**-0.5)
    assert _variants(extend_mod._kernel()) == before

    workspace = DecodeWorkspace(8, heads, dim, DEVICE)
    q = torch.randn(len(seq_lens), heads, dim, device=DEVICE).to(dtype)
    lens = torch.tensor(seq_lens, device=DEVICE)
    for splits in (1, 32):  # stage 2 compiles once per split padding class (splits_pad_for: 4 or 32)
        decode_attention(q, torch.empty_like(q), k_buf, v_buf, table, rows, lens, workspace, splits, dim**-0.5)
    before = [_variants(kernel) for kernel in decode_mod._kernels()]
    for splits, misaligned in ((1, True), (16, False), (3, True), (32, False), (4, True), (5, False)):
        index = (_misaligned(rows), _misaligned(lens)) if misaligned else (rows, lens)
        decode_attention(q, torch.empty_like(q), k_buf, v_buf, table, *index, workspace, splits, dim**-0.5)
    assert [_variants(kernel) for kernel in decode_mod._kernels()] == before


@pytest.mark.parametrize("vocab", [1000, 128256, 151936])
def test_bitmask_matches_reference(vocab):
    words = (vocab + 31) // 32
    for width in (words, words - 3):  # masks shorter than the vocabulary disallow the tail
        logits = torch.randn(5, vocab, device=DEVICE)
        mask = torch.randint(-(2**31), 2**31 - 1, (5, width), dtype=torch.int32, device=DEVICE)
        expected = apply_token_bitmask_torch_(logits.clone(), mask)
        assert torch.equal(bitmask_triton.apply_token_bitmask_(logits, mask), expected)


@pytest.mark.parametrize("hidden", [512, 3584, 4096])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rmsnorm_matches_reference(hidden, dtype):
    x = torch.randn(300, hidden * 2, device=DEVICE).to(dtype)[:, :hidden]  # strided rows
    weight = (torch.rand(hidden, device=DEVICE) + 0.5).to(dtype)
    out, ref = rmsnorm(x, weight, 1e-5), rmsnorm_torch(x, weight, 1e-5)
    assert out.dtype == ref.dtype and _rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("heads,dim", [(32, 128), (28, 128), (8, 64)])
def test_rotary_matches_reference(heads, dim):
    from sgl_runtime.layers.rotary_embedding import RotaryEmbedding

    rope = RotaryEmbedding(dim, {"rope_theta": 500000.0}).to(DEVICE)
    positions = torch.randint(0, 8000, (257,), device=DEVICE)
    cos, sin = rope.cos_sin(positions)
    qkv = torch.randn(257, (heads + 16) * dim, device=DEVICE).to(torch.bfloat16)
    q = qkv[:, : heads * dim].view(257, heads, dim)  # a strided slice of the fused projection
    out = apply_rotary(q, cos, sin)
    assert _rel_err(out, apply_rotary_torch(q, cos, sin)) < 1e-2
    assert _rel_err(out.reshape(257, -1), rope.rotate(qkv[:, : heads * dim], (cos, sin))) < 1e-2


@pytest.mark.parametrize("hidden", [512, 3584, 4096])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_add_rmsnorm_matches_reference(hidden, dtype):
    x = torch.randn(300, hidden * 2, device=DEVICE).to(dtype)[:, :hidden]  # strided rows
    residual = (torch.randn(300, hidden, device=DEVICE) * 3).to(dtype)
    weight = (torch.rand(hidden, device=DEVICE) + 0.5).to(dtype)
    out, new_residual = fused_add_rmsnorm(x, residual, weight, 1e-6)
    ref, ref_residual = fused_add_rmsnorm_torch(x, residual, weight, 1e-6)
    if DEVICE == "cuda":  # rounds to nearest-even as torch's add does (the CPU interpreter truncates bf16)
        assert torch.equal(new_residual, ref_residual)
    assert _rel_err(new_residual, ref_residual) < 1e-2
    assert out.dtype == ref.dtype and _rel_err(out, ref) < 1e-2
    assert out.shape == new_residual.shape == (300, hidden)


@pytest.mark.parametrize("heads,dim", [(28, 128), (32, 128), (16, 64)])
def test_rmsnorm_per_head_on_fused_qkv_slice(heads, dim):
    qkv = torch.randn(77, (heads + 8) * dim, device=DEVICE).to(torch.bfloat16)
    q = qkv[:, : heads * dim].unflatten(-1, (heads, dim))  # [T, H, D], token stride of qkv (Qwen3's q_norm)
    weight = (torch.rand(dim, device=DEVICE) + 0.5).to(torch.bfloat16)
    out = rmsnorm(q, weight, 1e-6)
    assert out.shape == (77, heads, dim) and out.is_contiguous()
    assert _rel_err(out, rmsnorm_torch(q, weight, 1e-6)) < 1e-2


@pytest.mark.parametrize("heads,kv_heads,dim", [(32, 8, 128), (28, 4, 128), (8, 2, 64)])
def test_rotary_in_place_on_fused_qkv(heads, kv_heads, dim):
    from sgl_runtime.layers.rotary_embedding import RotaryEmbedding

    rope = RotaryEmbedding(dim, {"rope_theta": 1000000.0}).to(DEVICE)
    cos, sin = rope.cos_sin(torch.randint(0, 30000, (131,), device=DEVICE))
    qkv = torch.randn(131, (heads + 2 * kv_heads) * dim, device=DEVICE).to(torch.bfloat16)
    before = qkv.clone().unflatten(-1, (heads + 2 * kv_heads, dim))
    qk = qkv[:, : (heads + kv_heads) * dim].unflatten(-1, (heads + kv_heads, dim))  # q and k heads, side by side
    assert apply_rotary_(qk, cos, sin).data_ptr() == qkv.data_ptr()
    after = qkv.unflatten(-1, (heads + 2 * kv_heads, dim))
    expected = apply_rotary_torch(before[:, : heads + kv_heads], cos, sin)
    assert _rel_err(after[:, :heads], expected[:, :heads]) < 1e-2
    assert _rel_err(after[:, heads : heads + kv_heads], expected[:, heads:]) < 1e-2
    assert torch.equal(after[:, heads + kv_heads :], before[:, heads + kv_heads :])  # v untouched


@pytest.mark.parametrize("inter", [1000, 14336, 18944])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_silu_and_mul_matches_reference(inter, dtype):
    x = (torch.randn(65, 2 * inter, device=DEVICE) * 3).to(dtype)
    out = silu_and_mul(x)
    assert out.shape == (65, inter) and out.dtype == dtype
    assert _rel_err(out, silu_and_mul_torch(x)) < 1e-2
    strided = torch.randn(9, 2 * inter + 64, device=DEVICE).to(dtype)[:, : 2 * inter]
    assert _rel_err(silu_and_mul(strided), silu_and_mul_torch(strided)) < 1e-2


@pytest.mark.parametrize("arch", ["llama3", "qwen2", "qwen3"])
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_fused_layers_match_torch_layers(arch, dtype, tolerance, tmp_path, monkeypatch):
    """The whole model (hidden 96, intermediate 200) with fused kernels against the exact torch layers.

    float32 makes the comparison sharp (the paths agree to ~1e-7; a wiring slip such as leaving k
    unrotated or scaling the MLP by 5% moves the logits by 1e-2 / 4e-3); bfloat16 covers the casts."""
    from model_fixtures import ForwardHarness, make_tiny_checkpoint

    from sgl_runtime.forward_batch import ForwardMode
    from sgl_runtime.model_loader.loader import load_model

    overrides = dict(hidden_size=96, intermediate_size=200, num_attention_heads=6, num_key_value_heads=2)
    model = load_model(make_tiny_checkpoint(arch, tmp_path, **overrides), dtype, DEVICE)
    prompts = [[5, 17, 400, 9000, 33, 151000, 7], [42] * 12]
    logits = {}
    for fused in (True, False):
        monkeypatch.setattr(fusion, "use_fused_kernels", lambda x, fused=fused: fused)
        harness = ForwardHarness(model, dtype=dtype, device=DEVICE)
        slots = [harness.new_request() for _ in prompts]
        prefill = harness.run_forward([(s, 0, p) for s, p in zip(slots, prompts)])
        decode = harness.run_forward([(s, len(p), [11]) for s, p in zip(slots, prompts)], ForwardMode.DECODE)
        logits[fused] = torch.cat(prefill + decode)
    assert not logits[True].isnan().any()
    assert _rel_err(logits[True], logits[False]) < tolerance


# ---------------------------------------------------------------------- full model
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 4096,
    "max_position_embeddings": 2048,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
    "eos_token_id": 2,
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from sgl_runtime.model_loader.demo_tokenizer import get_qwen2_tokenizer_dir

    path = tmp_path_factory.mktemp("kernel-model")
    (path / "config.json").write_text(json.dumps(MODEL_CONFIG))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(get_qwen2_tokenizer_dir(), name), path / name)
    return str(path)


def _runner(model_dir: str, backend: str, cuda_graph: bool):
    from sgl_runtime.model_config import ModelConfig
    from sgl_runtime.model_executor.model_runner import ModelRunner
    from sgl_runtime.server_args import ServerArgs

    args = ServerArgs(
        model_path=model_dir,
        load_format="dummy",
        device=DEVICE,
        attention_backend=backend,
        disable_cuda_graph=not cuda_graph,
        max_total_tokens=8192,
        max_running_requests=16,
        cuda_graph_max_bs=8,
    )
    return ModelRunner(args, ModelConfig.from_path(model_dir, "auto", None, DEVICE))


def _forward_batch(runner, reqs, decode: bool, last_only: bool = False):
    """reqs: [(row, prefix_len, new token ids)]; allocates slots, fills req_to_token, logits for every
    token (or, `last_only`, each request's last token, as the scheduler asks)."""
    from sgl_runtime.forward_batch import ForwardBatch, ForwardMode

    ext = [len(t) for _, _, t in reqs]
    loc = runner.token_to_kv_pool.alloc(sum(ext))
    table = runner.req_to_token_pool.req_to_token
    ids, positions, offset = [], [], 0
    for (row, prefix, tokens), n in zip(reqs, ext):
        table[row, prefix : prefix + n] = loc[offset : offset + n].to(table.dtype)
        ids += tokens
        positions += range(prefix, prefix + n)
        offset += n

    def t(values):
        return torch.tensor(values, dtype=torch.int64, device=DEVICE)

    rows = list(itertools.accumulate(ext, initial=-1))[1:] if last_only else list(range(sum(ext)))
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND,
        batch_size=len(reqs),
        input_ids=t(ids),
        positions=t(positions),
        req_pool_indices=t([r for r, _, _ in reqs]),
        seq_lens=t([p + n for (_, p, _), n in zip(reqs, ext)]),
        extend_prefix_lens=t([p for _, p, _ in reqs]),
        extend_seq_lens=t(ext),
        extend_start_loc=t([0] + list(torch.tensor(ext).cumsum(0)[:-1].tolist())),
        out_cache_loc=loc.to(DEVICE),
        seq_lens_cpu=[p + n for (_, p, _), n in zip(reqs, ext)],
        extend_prefix_lens_cpu=[p for _, p, _ in reqs],
        extend_seq_lens_cpu=ext,
        logits_indices=t(rows),
        logits_indices_cpu=rows,
    )


def test_triton_backend_and_cuda_graphs_match_torch_backend(model_dir):
    torch_runner = _runner(model_dir, "torch", cuda_graph=False)
    triton_runner = _runner(model_dir, "triton", cuda_graph=DEVICE == "cuda")
    gen = torch.Generator().manual_seed(0)

    def tokens(n):
        return torch.randint(10, 4096, (n,), generator=gen).tolist()

    # prefill (incl. a 1-token prompt), then a mixed extend on cached prefixes (chunk / jump-forward sizes)
    steps = [[(0, 0, tokens(300)), (1, 0, tokens(1)), (2, 0, tokens(77))]]
    steps.append([(0, 300, tokens(5)), (1, 1, tokens(1)), (2, 77, tokens(130))])
    lens = {0: 305, 1: 2, 2: 207}
    for _ in range(4):  # decode steps, batch 3 (padded to 4 under graphs)
        steps.append([(row, lens[row], tokens(1)) for row in (0, 1, 2)])
        lens = {row: n + 1 for row, n in lens.items()}
    for step in steps:
        decode = all(len(t) == 1 for _, _, t in step)
        ref = torch_runner.forward(_forward_batch(torch_runner, step, decode))
        batch = _forward_batch(triton_runner, step, decode)
        out = triton_runner.forward(batch)
        assert out.shape == ref.shape and not out.isnan().any()
        assert _rel_err(out, ref) < 2e-2, (step[0][1], decode)
        if decode and triton_runner.cuda_graph_runner is not None:
            graph_out = out.clone()
            graphs, triton_runner.cuda_graph_runner = triton_runner.cuda_graph_runner, None
            eager = triton_runner.forward(batch)  # rewrites the same K/V, then attends eagerly
            triton_runner.cuda_graph_runner = graphs
            assert _rel_err(graph_out, eager) < 5e-3
            assert torch.equal(graph_out.argmax(-1), eager.argmax(-1))


def test_small_extends_replay_the_decode_graphs_like_eager_extends(model_dir):
    """Jump-forward-sized extends replay the decode graphs one row per token (two replays when the
    rows exceed the largest graph) and give the eager extend's logits."""
    if DEVICE != "cuda":
        pytest.skip("CUDA graphs need CUDA")
    runner = _runner(model_dir, "triton", cuda_graph=True)
    graphs = runner.cuda_graph_runner
    replays = []
    replay = graphs.replay
    graphs.replay = lambda batch: replays.append(batch.batch_size) or replay(batch)
    gen = torch.Generator().manual_seed(1)

    def tokens(n):
        return torch.randint(10, 4096, (n,), generator=gen).tolist()

    runner.forward(_forward_batch(runner, [(0, 0, tokens(300)), (1, 0, tokens(1)), (2, 0, tokens(77))], False))
    assert replays == []  # 378 tokens: eager
    steps = [
        ([(0, 300, tokens(5)), (1, 1, tokens(1)), (2, 77, tokens(6))], True, [8, 4]),  # 12 rows > max_bs 8
        ([(0, 305, tokens(3)), (2, 83, tokens(2))], False, [5]),
    ]
    for step, last_only, expected_replays in steps:
        replays.clear()
        batch = _forward_batch(runner, step, False, last_only)
        out = runner.forward(batch)
        assert replays == expected_replays
        runner.cuda_graph_runner = None
        eager = runner.forward(batch)  # rewrites the same K/V, then the extend kernel attends
        runner.cuda_graph_runner = graphs
        assert out.shape == eager.shape == (len(batch.logits_indices_cpu), MODEL_CONFIG["vocab_size"])
        assert _rel_err(out, eager) < 2e-2  # split-KV decode vs extend kernel in bf16: 5.5e-3 measured
