"""ModelConfig, tokenizer utils, rope scaling and the registry/loader's error paths."""

from __future__ import annotations

import json

import pytest
import torch
from model_fixtures import make_tiny_checkpoint

from sgl_runtime.layers.rotary_embedding import rope_inv_freq
from sgl_runtime.model_config import ModelConfig, resolve_dtype, rope_parameters
from sgl_runtime.model_loader.loader import load_model
from sgl_runtime.models.registry import get_model_class
from sgl_runtime.tokenizer_utils import get_chat_template, get_eos_token_ids, load_tokenizer


@pytest.fixture(scope="module")
def qwen3_path(tmp_path_factory):
    path = make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("qwen3"))
    with open(f"{path}/generation_config.json", "w") as f:
        json.dump({"eos_token_id": [151645, 151643]}, f)
    return path


def test_model_config_fields(qwen3_path):
    config = ModelConfig.from_path(qwen3_path)
    assert config.dtype == torch.float32
    assert config.context_length == 512
    assert (config.vocab_size, config.num_layers, config.hidden_size) == (151936, 2, 64)
    assert (config.num_attention_heads, config.num_kv_heads, config.head_dim) == (4, 2, 32)
    assert config.eos_token_ids == {151645, 151643}
    assert config.architectures == ["Qwen3ForCausalLM"]


def test_context_length_override_and_limit(qwen3_path):
    assert ModelConfig.from_path(qwen3_path, context_length=100).context_length == 100
    with pytest.raises(ValueError, match="context_length=1000 exceeds .* 512"):
        ModelConfig.from_path(qwen3_path, context_length=1000)


def test_sliding_window_caps_context_length(tmp_path):
    path = make_tiny_checkpoint("mistral", tmp_path, sliding_window=128)
    assert ModelConfig.from_path(path).context_length == 128


def test_dtype_resolution():
    assert resolve_dtype("auto", "float16", "cpu") == torch.float32
    assert resolve_dtype("auto", "float16", "cuda") == torch.float16
    assert resolve_dtype("auto", "bfloat16", "cpu") == torch.bfloat16
    assert resolve_dtype("auto", None, "cpu") == torch.float32
    assert resolve_dtype("bfloat16", "float32", "cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="not supported on CPU"):
        resolve_dtype("float16", "float32", "cpu")
    with pytest.raises(ValueError, match="unsupported dtype 'int8'"):
        resolve_dtype("int8", None, "cuda")


def test_eos_ids_from_config_and_tokenizer(tmp_path):
    path = make_tiny_checkpoint("llama2", tmp_path, eos_token_id=7)
    # no generation_config.json eos: config.json's id plus the tokenizer's <|im_end|>
    (tmp_path / "generation_config.json").unlink(missing_ok=True)
    assert ModelConfig.from_path(path).eos_token_ids == {7, 151645}
    tokenizer = load_tokenizer(path)
    assert get_eos_token_ids(path, tokenizer) == {7, 151645}


def test_tokenizer_and_chat_template(qwen3_path, tmp_path):
    tokenizer = load_tokenizer(qwen3_path)
    assert len(tokenizer) == 151665
    assert "<|im_start|>" in get_chat_template(tokenizer)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n")
    custom = load_tokenizer(qwen3_path, chat_template="{{ messages[0]['content'] }}")
    assert custom.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "x"
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        load_tokenizer(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(str(tmp_path / "nope"))


@pytest.mark.parametrize("factor,original", [(8.0, 8192), (32.0, 8192), (8.0, 64)])
def test_llama3_rope_matches_transformers(factor, original):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = dict(
        rope_type="llama3",
        factor=factor,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=original,
    )
    hf_config = LlamaConfig(
        max_position_embeddings=131072,
        rope_scaling=scaling,
        rope_theta=500000.0,
        hidden_size=4096,
        num_attention_heads=32,
    )
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    ours = rope_inv_freq(128, rope_parameters(hf_config))
    torch.testing.assert_close(ours, expected)
    assert not torch.allclose(ours, rope_inv_freq(128, {"rope_theta": 500000.0}))


def test_rope_parameters_reads_legacy_fields():
    class Legacy:
        rope_theta = 123.0
        rope_scaling = {"type": "linear", "factor": 2.0}

    params = rope_parameters(Legacy())
    assert params["rope_type"] == "linear" and params["rope_theta"] == 123.0
    with pytest.raises(ValueError, match="unsupported rope_type 'longrope'"):
        rope_inv_freq(8, {"rope_type": "longrope"})


def test_unknown_architecture_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*LlamaForCausalLM.*Qwen3ForCausalLM"):
        get_model_class(["GPT2LMHeadModel"])
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["FancyNewModel"], "model_type": "fancy"}))
    with pytest.raises(ValueError, match="unsupported model architecture .*FancyNewModel.*supported: "):
        load_model(str(tmp_path), torch.float32, "cpu")


def test_missing_checkpoint_files_are_clear_errors(tmp_path, qwen3_path):
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        ModelConfig.from_path(str(tmp_path))
    (tmp_path / "config.json").write_text(open(f"{qwen3_path}/config.json").read())
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_model(str(tmp_path), torch.float32, "cpu")


def test_checkpoint_missing_a_tensor_names_it(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_tiny_checkpoint("llama2", tmp_path)
    tensors = load_file(f"{path}/model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, f"{path}/model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="model.layers.1.mlp.gate_up_proj.weight"):
        load_model(path, torch.float32, "cpu")


def test_dummy_load_is_seeded_and_sane(qwen3_path):
    a = load_model(qwen3_path, torch.float32, "cpu", load_format="dummy", seed=3)
    b = load_model(qwen3_path, torch.float32, "cpu", load_format="dummy", seed=3)
    c = load_model(qwen3_path, torch.float32, "cpu", load_format="dummy", seed=4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if name.endswith("norm.weight"):
            assert torch.all(pa == 1)
        else:
            assert not torch.equal(pa, pc) and pa.abs().max() <= 0.02
    assert a.lm_head.weight is not a.model.embed_tokens.weight  # qwen3 recipe is untied


def test_bfloat16_on_cpu(qwen3_path):
    from model_fixtures import ForwardHarness, hf_reference_logits

    model = load_model(qwen3_path, torch.bfloat16, "cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    harness = ForwardHarness(model, dtype=torch.bfloat16)
    ids = [1, 2, 3, 4, 5]
    logits = harness.run_forward([(harness.new_request(), 0, ids)])[0]
    assert logits.dtype == torch.float32
    ref = hf_reference_logits(qwen3_path, ids)
    assert (logits - ref).abs().max() < 0.1 * ref.abs().max()
