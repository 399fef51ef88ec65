"""GGUF loading against transformers' own GGUF loading of the same file: small files written here with
gguf.GGUFWriter (Llama with llama.cpp's q/k permutation, Qwen2, Qwen3; F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K/Q6_K),
through the real resolution (file -> converted model directory) and loader."""

from __future__ import annotations

import shutil

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_fixtures import (
    CHATML,
    permute_like_llama_cpp,
    transformers_gguf_model,
    write_tiny_gguf,
)
from model_fixtures import load_for_test

from sgl_runtime.model_config import ModelConfig
from sgl_runtime.model_loader.gguf_loader import unpermute_qk
from sgl_runtime.model_loader.model_source import resolve_model_path
from sgl_runtime.tokenizer_utils import load_tokenizer

# name -> (GGUF architecture, storage type per tensor kind); together they cover every supported type.
FILES = {
    "qwen2-q8-q4": (
        "qwen2",
        {
            "attn_q": Q.Q8_0,
            "attn_k": Q.Q4_0,
            "attn_v": Q.Q4_1,
            "attn_output": Q.Q8_0,
            "ffn_gate": Q.Q4_0,
            "ffn_up": Q.Q4_1,
            "ffn_down": Q.Q8_0,
            "token_embd": Q.F16,
        },
    ),
    "qwen3-kquants": (
        "qwen3",
        {
            "attn_q": Q.Q4_K,
            "attn_k": Q.Q6_K,
            "attn_v": Q.BF16,
            "attn_output": Q.Q6_K,
            "ffn_gate": Q.Q4_K,
            "ffn_up": Q.Q6_K,
            "ffn_down": Q.Q4_K,
            "output": Q.Q8_0,
        },
    ),
    "llama-permuted": ("llama", {"attn_q": Q.Q8_0, "attn_k": Q.F16, "ffn_down": Q.Q4_1, "token_embd": Q.Q8_0}),
}
TOKENS = [5, 70, 300, 12, 99, 7, 250, 301, 44, 128, 3, 260]


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory, gguf_cache):
    out = {}
    for name, (arch, qtypes) in FILES.items():
        directory = tmp_path_factory.mktemp(name)
        out[name] = write_tiny_gguf(directory / f"tiny-{name}.gguf", arch, qtypes)
    return out


@pytest.mark.parametrize("name", list(FILES))
def test_float32_logits_match_transformers_gguf_loading(name, gguf_files):
    path = gguf_files[name]
    reference = transformers_gguf_model(path)(torch.tensor([TOKENS])).logits[0]  # [T, vocab]
    _, harness = load_for_test(resolve_model_path(path))
    logits = harness.run_forward([(harness.new_request(), 0, TOKENS)])[0]
    scale = reference.abs().max().item()
    torch.testing.assert_close(logits, reference, rtol=0, atol=1e-4 * scale)
    assert logits.argmax(-1).tolist() == reference.argmax(-1).tolist()


def test_bfloat16_logits_stay_within_bf16_tolerance(gguf_files):
    path = gguf_files["qwen3-kquants"]
    reference = transformers_gguf_model(path)(torch.tensor([TOKENS])).logits[0]
    model, harness = load_for_test(resolve_model_path(path), dtype=torch.bfloat16)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    logits = harness.run_forward([(harness.new_request(), 0, TOKENS)])[0]
    torch.testing.assert_close(logits, reference, rtol=0, atol=0.05 * reference.abs().max().item())


@pytest.mark.parametrize("name", ["qwen2-q8-q4", "qwen3-kquants"])
def test_config_and_tokenizer_come_from_the_gguf_metadata(name, gguf_files):
    from pathlib import Path

    from transformers import AutoTokenizer

    path = Path(gguf_files[name])
    model_dir = resolve_model_path(str(path))
    config = ModelConfig.from_path(model_dir)
    assert config.architectures == [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[FILES[name][0]]]
    assert (config.num_layers, config.hidden_size, config.num_attention_heads, config.num_kv_heads) == (2, 256, 4, 2)
    assert config.head_dim == (128 if name.startswith("qwen3") else 64)  # qwen3: attention.key_length, not 256 / 4
    assert config.context_length == 512
    tokenizer = load_tokenizer(model_dir)
    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert config.eos_token_ids == {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    text = "the rain in toast <|im_start|>hello<|im_end|>"
    assert tokenizer.encode(text) == reference.encode(text)
    assert tokenizer.chat_template == CHATML
    messages = [{"role": "user", "content": "hi there"}]
    assert (
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        == "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"
    )


def test_engine_greedy_on_a_gguf_file_matches_transformers(gguf_files):
    from sgl_runtime.engine import Engine

    path = gguf_files["llama-permuted"]
    reference = transformers_gguf_model(path)
    ids = list(TOKENS)
    with torch.no_grad():
        for _ in range(8):
            ids.append(int(reference(torch.tensor([ids])).logits[0, -1].argmax()))
    with Engine(path, device="cpu", max_total_tokens=512) as engine:
        out = engine.generate(
            input_ids=TOKENS, sampling_params={"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
        )
    assert out["output_ids"] == ids[len(TOKENS) :]


def test_a_directory_holding_one_gguf_resolves_like_the_file(gguf_files, tmp_path):
    path = gguf_files["qwen2-q8-q4"]
    directory = tmp_path / "only-gguf"
    directory.mkdir()
    shutil.copy(path, directory / "model.gguf")
    converted = resolve_model_path(str(directory))
    assert ModelConfig.from_path(converted).architectures == ["Qwen2ForCausalLM"]
    assert resolve_model_path(converted) == converted  # a converted directory resolves to itself
    # A safetensors checkpoint that also carries a GGUF export loads the safetensors unless forced.
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes(b"")
    assert resolve_model_path(str(directory)) == str(directory)
    assert resolve_model_path(str(directory), load_format="gguf") == converted
    shutil.copy(path, directory / "other.gguf")
    with pytest.raises(ValueError, match="several GGUF files"):
        resolve_model_path(str(directory), load_format="gguf")


def test_unreadable_and_unsupported_files_fail_with_one_line(tmp_path, gguf_cache):
    import gguf

    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="junk.gguf.* is not a readable GGUF file"):
        resolve_model_path(str(junk))
    writer = gguf.GGUFWriter(str(tmp_path / "phi.gguf"), "phi2")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="GGUF architecture 'phi2' is not supported"):
        resolve_model_path(str(tmp_path / "phi.gguf"))


def test_unpermute_inverts_llama_cpp_permutation():
    weights = torch.randn(6 * 8, 16).numpy()  # 6 heads of size 8
    permuted = permute_like_llama_cpp(weights, 6)
    assert not (permuted == weights).all()
    assert (unpermute_qk(permuted, 6) == weights).all()
