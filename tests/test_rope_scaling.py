"""Rope scaling (linear, dynamic NTK, YaRN, llama3) against transformers' rotary embedding for the same
config, tiny random checkpoints with each scaling matched layer by layer, and the --context-length
limit each rope config implies."""

from __future__ import annotations

import pytest
import torch
from layer_compare import assert_layers_match
from model_fixtures import make_tiny_checkpoint

from sgl_runtime.layers.rotary_embedding import RotaryEmbedding, rope_attention_factor, rope_inv_freq
from sgl_runtime.model_config import ModelConfig, rope_context_limit, rope_parameters

MAX_POS = 32
# name -> (rope_scaling, context the config supports)
SCALINGS = {
    "linear": (dict(rope_type="linear", factor=2.0), 64),
    "dynamic": (dict(rope_type="dynamic", factor=2.0), 64),
    "yarn": (dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16), 64),  # Qwen2.5/Qwen3 style
    "yarn-untruncated": (
        dict(
            rope_type="yarn", factor=3.0, original_max_position_embeddings=32, beta_fast=16, beta_slow=2, truncate=False
        ),
        96,
    ),
    "yarn-mscale": (
        dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=8, mscale=0.707, mscale_all_dim=1.0),
        64,
    ),
    "llama3": (
        dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8,
        ),
        32,
    ),
}


def _llama_config(scaling: dict, head_dim: int = 16):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        max_position_embeddings=MAX_POS,
        rope_theta=10000.0,
        rope_scaling=dict(scaling),
    )


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("head_dim", [16, 128])
def test_cos_sin_match_transformers_rotary(name, head_dim):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    scaling, limit = SCALINGS[name]
    config = _llama_config(scaling, head_dim)
    hf_rotary = LlamaRotaryEmbedding(config)
    ours = RotaryEmbedding(head_dim, rope_parameters(config))
    # the whole supported length (dynamic NTK: transformers rescales to the longest position, we use it always)
    positions = torch.arange(limit)
    hf_cos, hf_sin = hf_rotary(torch.zeros(1, limit, head_dim), positions[None])
    cos, sin = ours.cos_sin(positions)
    torch.testing.assert_close(cos[:, 0], hf_cos[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sin[:, 0], hf_sin[0], atol=1e-5, rtol=1e-5)
    default = rope_inv_freq(head_dim, {"rope_theta": 10000.0})
    assert not torch.allclose(ours.inv_freq, default)  # the scaling changed something


def test_yarn_attention_factor_and_frequencies_follow_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for name in ("yarn", "yarn-untruncated", "yarn-mscale"):
        config = _llama_config(SCALINGS[name][0], 128)
        expected, factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
        params = rope_parameters(config)
        torch.testing.assert_close(rope_inv_freq(128, params), expected)
        assert rope_attention_factor(params) == pytest.approx(factor)
    assert rope_attention_factor(rope_parameters(_llama_config(SCALINGS["linear"][0]))) == 1.0


def test_dynamic_ntk_matches_transformers_at_the_longest_length():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _llama_config(SCALINGS["dynamic"][0], 128)
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=MAX_POS * 2)
    torch.testing.assert_close(rope_inv_freq(128, rope_parameters(config)), expected)


@pytest.mark.parametrize(
    "name,arch",
    [("linear", "llama2"), ("dynamic", "llama2"), ("yarn", "qwen3"), ("yarn-mscale", "qwen2"), ("llama3", "llama3")],
)
def test_checkpoint_with_rope_scaling_matches_transformers_per_layer(name, arch, tmp_path):
    scaling, limit = SCALINGS[name]
    path = make_tiny_checkpoint(
        arch, tmp_path, max_position_embeddings=MAX_POS, rope_scaling=dict(scaling), num_hidden_layers=3
    )
    assert ModelConfig.from_path(path, context_length=limit).context_length == limit
    ids = [(7919 * i + 13) % 150000 for i in range(limit)]  # positions up to the supported context length
    assert_layers_match(path, ids, max_context=limit + 1)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_rope_context_limit(name):
    scaling, limit = SCALINGS[name]
    assert rope_context_limit(_llama_config(scaling)) == limit


def test_context_length_beyond_the_rope_config_is_a_clear_error(tmp_path):
    plain = make_tiny_checkpoint("llama2", tmp_path / "plain", max_position_embeddings=MAX_POS)
    with pytest.raises(
        ValueError,
        match=r"context_length=64 exceeds the model's maximum of 32 tokens "
        r"\(max_position_embeddings=32 with rope_type 'default'; a rope_scaling",
    ):
        ModelConfig.from_path(plain, context_length=64)
    yarn = make_tiny_checkpoint(
        "qwen3", tmp_path / "yarn", max_position_embeddings=MAX_POS, rope_scaling=dict(SCALINGS["yarn"][0])
    )
    assert ModelConfig.from_path(yarn).context_length == MAX_POS  # the default stays the config's own
    assert ModelConfig.from_path(yarn, context_length=64).context_length == 64
    with pytest.raises(ValueError, match="exceeds the model's maximum of 64 tokens .*extended by rope_type 'yarn'"):
        ModelConfig.from_path(yarn, context_length=65)


def test_server_refuses_to_start_with_too_long_a_context(tmp_path, capfd):
    from sgl_runtime import launch_server

    path = make_tiny_checkpoint("llama2", tmp_path, max_position_embeddings=MAX_POS)
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        launch_server.main(["--model-path", path, "--context-length", "1000", "--port", "0", "--device", "cpu"])
    assert exc.value.code == 1
    errors = [line for line in capfd.readouterr().err.splitlines() if "ERROR" in line]
    assert len(errors) == 1
    assert "cannot start the server: context_length=1000 exceeds the model's maximum of 32 tokens" in errors[0]


@pytest.mark.gpu
@pytest.mark.parametrize("name,arch", [("yarn", "qwen3"), ("linear", "llama2")])
def test_scaled_rope_through_the_triton_path_matches_transformers(name, arch, tmp_path):
    """On CUDA the rotary kernel takes the scaled (and, for YaRN, attention-factor-weighted) tables."""
    from engine_fixtures import hf_greedy, random_prompts

    from sgl_runtime.engine import Engine

    scaling, limit = SCALINGS[name]
    path = make_tiny_checkpoint(arch, tmp_path, max_position_embeddings=MAX_POS, rope_scaling=dict(scaling))
    prompts = random_prompts((limit - 8, 20, 3), seed=54)
    params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    engine = Engine(path, device="cuda", dtype="float32", context_length=limit, max_total_tokens=1024)
    try:
        results = engine.generate(input_ids=prompts, sampling_params=params)
    finally:
        engine.shutdown()
    assert [r["output_ids"] for r in results] == [hf_greedy(path, p, 8) for p in prompts]


def test_frequency_factors_divide_the_frequencies_of_their_rope_type():
    """A GGUF's rope_freqs factors, as llama.cpp applies them: theta_i = pos * inv_freq_i / factor_i."""
    factors = [1.0, 1.5, 2.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    default = rope_inv_freq(16, {"rope_theta": 500000.0})
    assert torch.equal(
        rope_inv_freq(16, {"rope_theta": 500000.0, "freq_factors": factors}), default / torch.tensor(factors)
    )
    linear = {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0, "freq_factors": factors}
    assert torch.equal(rope_inv_freq(16, linear), default / 2.0 / torch.tensor(factors))
    with pytest.raises(ValueError, match="7 rope frequency factors for 8 frequencies"):
        rope_inv_freq(16, {"freq_factors": factors[:7]})
    with pytest.raises(ValueError, match="combine only with rope_type default or linear"):
        rope_inv_freq(16, {**SCALINGS["yarn"][0], "freq_factors": factors})
