"""Llama-3.1-style GGUF files, which carry llama3 rope scaling as a rope_freqs tensor of per-frequency
factors: served logits against transformers' LlamaForCausalLM on the same weights as a safetensors
checkpoint with the llama3 rope_scaling, the converted config, and the context-length limit.

transformers' own GGUF loading is no reference here: it ignores rope_freqs (its GGUF config mapping
reads no rope scaling for llama, and the tensor maps to no parameter), so it serves default rope.
`test_transformers_gguf_loading_ignores_rope_freqs` pins that down.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_fixtures import (
    byte_level_vocab,
    llama_cpp_rope_freqs,
    transformers_gguf_model,
    write_gguf,
    write_llama3_pair,
)
from model_fixtures import load_for_test

from sgl_runtime.layers.rotary_embedding import rope_inv_freq
from sgl_runtime.model_config import ModelConfig, rope_parameters
from sgl_runtime.model_loader.model_source import resolve_model_path

# Llama-3.1's shape of scaling, shrunk: frequencies whose wavelength exceeds 256 positions are divided by 8,
# those under 64 kept, those between interpolated. head_dim 32 at rope_theta 500000 puts 3 of its 16
# frequencies in the kept band, 2 in the interpolated one and 11 in the scaled one; over a 160-token prompt
# the kept-or-scaled choice turns the mid frequencies by radians.
LLAMA3 = dict(
    rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=256
)
SHAPE = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=500000.0,
    max_position_embeddings=2048,  # the GGUF's llama.context_length
)
HEAD_DIM = 32
PROMPT = [int(t) for t in np.random.default_rng(3).integers(0, len(byte_level_vocab()[0]), size=160)]


@pytest.fixture(scope="module")
def llama3_files(tmp_path_factory, gguf_cache):
    """(GGUF file with rope_freqs, safetensors checkpoint with the llama3 rope_scaling)."""
    return write_llama3_pair(tmp_path_factory.mktemp("llama3"), LLAMA3, qk_scale=3.0, **SHAPE)


def _hf_logits(checkpoint: str, rope_parameters: dict | None = None) -> torch.Tensor:
    """transformers' logits [T, vocab] for PROMPT; `rope_parameters` replaces the checkpoint's."""
    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(checkpoint)
    if rope_parameters is not None:
        config.rope_parameters = rope_parameters
    model = LlamaForCausalLM.from_pretrained(checkpoint, config=config, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


def _served_logits(gguf_file: str) -> torch.Tensor:
    _, harness = load_for_test(resolve_model_path(gguf_file), harness_kwargs={"max_context": 256})
    return harness.run_forward([(harness.new_request(), 0, PROMPT)])[0]


def test_gguf_with_rope_freqs_matches_the_llama3_checkpoint(llama3_files):
    gguf_file, checkpoint = llama3_files
    reference = _hf_logits(checkpoint)  # transformers' llama3 rope
    logits = _served_logits(gguf_file)
    scale = reference.abs().max().item()
    torch.testing.assert_close(logits, reference, rtol=0, atol=1e-5 * scale)  # measured: ~3e-7 * scale
    assert logits.argmax(-1).tolist() == reference.argmax(-1).tolist()
    # Not vacuous: without the factors (default rope at the same theta) the logits are far off (~0.16 * scale).
    unscaled = _hf_logits(checkpoint, {"rope_type": "default", "rope_theta": SHAPE["rope_theta"]})
    assert (unscaled - reference).abs().max().item() > 0.03 * scale
    assert unscaled.argmax(-1).tolist() != reference.argmax(-1).tolist()


def test_converted_config_carries_the_factors_and_the_model_divides_by_them(llama3_files):
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    gguf_file, checkpoint = llama3_files
    model_dir = resolve_model_path(gguf_file)
    written = llama_cpp_rope_freqs(AutoConfig.from_pretrained(checkpoint))
    assert sorted(set(written.tolist())) != [1.0]  # kept, interpolated and scaled bands all present
    raw = json.loads((Path(model_dir) / "config.json").read_text())
    assert raw["rope_freq_factors"] == written.tolist()  # bit for bit through JSON
    config = ModelConfig.from_path(model_dir)
    params = rope_parameters(config.hf_config)
    assert (params["rope_type"], params["rope_theta"]) == ("default", SHAPE["rope_theta"])
    model, _ = load_for_test(model_dir)
    inv_freq = model.model.rotary_emb.inv_freq
    default = rope_inv_freq(HEAD_DIM, {"rope_theta": SHAPE["rope_theta"]})
    assert torch.equal(inv_freq, default / torch.from_numpy(written))  # llama.cpp's freq / factor, exactly
    hf_llama3, _ = ROPE_INIT_FUNCTIONS["llama3"](AutoConfig.from_pretrained(checkpoint), "cpu")
    torch.testing.assert_close(inv_freq, hf_llama3, rtol=1e-6, atol=0)  # HF's llama3 frequencies, to rounding


def test_context_length_is_the_gguf_context_length(llama3_files):
    """llama.cpp writes HF's max_position_embeddings (Llama-3.1: 131072, already the extended length; the
    llama3 original_max_position_embeddings, 8192, only shapes the factors) as {arch}.context_length. The
    factors do not extend it further, as HF's llama3 rope_scaling does not."""
    gguf_file, checkpoint = llama3_files
    model_dir = resolve_model_path(gguf_file)
    assert ModelConfig.from_path(model_dir).context_length == 2048
    assert ModelConfig.from_path(checkpoint, context_length=2048).context_length == 2048
    with pytest.raises(ValueError, match=r"maximum of 2048 tokens .*rope_type 'default' and the GGUF's rope_freqs"):
        ModelConfig.from_path(model_dir, context_length=2049)
    with pytest.raises(ValueError, match="maximum of 2048 tokens"):
        ModelConfig.from_path(checkpoint, context_length=2049)


def test_transformers_gguf_loading_ignores_rope_freqs(llama3_files):
    """Why the reference is the safetensors checkpoint: transformers' GGUF loading serves default rope."""
    gguf_file, checkpoint = llama3_files
    with torch.no_grad():
        theirs = transformers_gguf_model(gguf_file)(torch.tensor([PROMPT])).logits[0]
    unscaled = _hf_logits(checkpoint, {"rope_type": "default", "rope_theta": SHAPE["rope_theta"]})
    torch.testing.assert_close(theirs, unscaled, rtol=0, atol=1e-4 * unscaled.abs().max().item())


def test_rope_freqs_of_the_wrong_size_fail_at_conversion(tmp_path, gguf_cache):
    from gguf_fixtures import tiny_hf_model

    model, _ = tiny_hf_model("llama", **SHAPE)
    path = write_gguf(tmp_path / "bad.gguf", "llama", model, {}, extra_tensors={"rope_freqs.weight": np.ones(8)})
    with pytest.raises(ValueError, match=r"bad.gguf.*rope_freqs must hold 16 finite positive factors .*got 8"):
        resolve_model_path(path)


def test_the_weight_loader_skips_rope_freqs_only_when_the_config_carries_them(llama3_files):
    from sgl_runtime.model_loader.gguf_loader import hf_weight_names, iter_gguf_weights, tensor_index

    gguf_file, _ = llama3_files
    model, _ = load_for_test(resolve_model_path(gguf_file))
    config, hf_names = model.config, hf_weight_names(model)
    arch, entries = tensor_index(gguf_file)
    names = [name for name, _ in iter_gguf_weights(gguf_file, arch, entries, hf_names, config)]
    assert len(names) == len(entries) - 1 and not any("rope" in n for n in names)
    del config.rope_freq_factors  # a config converted without them would serve default rope: refused
    with pytest.raises(ValueError, match="carries rope_freqs but its converted config lacks rope_freq_factors"):
        next(iter_gguf_weights(gguf_file, arch, entries, hf_names, config))


# llama.cpp's converter writes an HF rope_scaling of type linear or yarn as metadata keys
SCALED = {
    "linear": (
        {"rope_type": "linear", "factor": 4.0},
        {"{arch}.rope.scaling.type": "linear", "{arch}.rope.scaling.factor": 4.0},
    ),
    "yarn": (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
        {
            "{arch}.rope.scaling.type": "yarn",
            "{arch}.rope.scaling.factor": 4.0,
            "{arch}.rope.scaling.original_context_length": 512,
        },
    ),
}


@pytest.mark.parametrize("kind", list(SCALED))
def test_gguf_rope_scaling_metadata_matches_the_scaled_checkpoint(kind, tmp_path, gguf_cache):
    """transformers' GGUF config code reads no {arch}.rope.scaling.* keys; served without them, a file
    converted from a scaled checkpoint would run plain rope."""
    from gguf_fixtures import tiny_hf_model

    hf_scaling, metadata = SCALED[kind]
    model, _ = tiny_hf_model("llama", rope_scaling=dict(hf_scaling), **{**SHAPE, "max_position_embeddings": 512})
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".q_proj." in name or ".k_proj." in name:
                param.mul_(3.0)  # sharper attention: the logits depend more on the rotary angles
    model.save_pretrained(str(tmp_path / "hf"))
    gguf_file = write_gguf(tmp_path / f"{kind}.gguf", "llama", model, {}, extra_metadata=metadata)
    params = rope_parameters(ModelConfig.from_path(resolve_model_path(gguf_file)).hf_config)
    assert {k: params[k] for k in hf_scaling} == hf_scaling
    reference = _hf_logits(str(tmp_path / "hf"))
    logits = _served_logits(gguf_file)
    scale = reference.abs().max().item()
    torch.testing.assert_close(logits, reference, rtol=0, atol=1e-5 * scale)
    unscaled = _hf_logits(str(tmp_path / "hf"), {"rope_type": "default", "rope_theta": SHAPE["rope_theta"]})
    assert (unscaled - reference).abs().max().item() > 0.03 * scale  # not vacuous: plain rope is far off


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"{arch}.rope.scaling.type": "longrope", "{arch}.rope.scaling.factor": 4.0}, "rope scaling type 'longrope'"),
        (
            {
                "{arch}.rope.scaling.type": "yarn",
                "{arch}.rope.scaling.factor": 4.0,
                "{arch}.rope.scaling.yarn_log_multiplier": 0.1,
            },
            "llama.rope.scaling.yarn_log_multiplier",
        ),
    ],
)
def test_gguf_rope_scaling_without_an_exact_counterpart_is_refused(metadata, message, tmp_path, gguf_cache):
    from gguf_fixtures import tiny_hf_model

    model, _ = tiny_hf_model("llama", **SHAPE)
    path = write_gguf(tmp_path / "scaled.gguf", "llama", model, {}, extra_metadata=metadata)
    with pytest.raises(ValueError, match=f"scaled.gguf.*states {message}.* which GGUF loading does not support"):
        resolve_model_path(path)
