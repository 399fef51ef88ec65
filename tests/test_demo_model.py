"""The built-in demo checkpoint: deterministic, loadable, real Qwen2.5 tokenizer, safe under concurrent first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from model_fixtures import ForwardHarness
from safetensors.torch import load_file

from sgl_runtime.model_config import ModelConfig
from sgl_runtime.model_loader.demo_model import get_demo_model_path
from sgl_runtime.model_loader.loader import load_model
from sgl_runtime.tokenizer_utils import load_tokenizer


def test_demo_model_is_deterministic_and_loads(tmp_path):
    first = get_demo_model_path(tmp_path / "a")
    second = get_demo_model_path(tmp_path / "b")
    assert first != second
    a, b = load_file(f"{first}/model.safetensors"), load_file(f"{second}/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert get_demo_model_path(tmp_path / "a") == first  # cached

    config = json.loads(Path(first, "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["tie_word_embeddings"] is True
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (128, 2, 151936)

    model_config = ModelConfig.from_path(first)
    assert model_config.dtype == torch.float32 and model_config.context_length == 4096
    assert {151645, 151643} <= model_config.eos_token_ids
    tokenizer = load_tokenizer(first)
    assert len(tokenizer) == 151665 and tokenizer.eos_token_id == 151645
    assert "<|im_start|>" in tokenizer.chat_template

    model = load_model(first, torch.float32, "cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    harness = ForwardHarness(model)
    ids = tokenizer.encode("Hello, world")
    logits = harness.run_forward([(harness.new_request(), 0, ids)], all_logits=False)[0]
    assert logits.shape == (1, 151936) and torch.isfinite(logits).all()


def test_concurrent_first_use_is_safe(tmp_path):
    code = "import sys; from sgl_runtime.model_loader.demo_model import get_demo_model_path; print(get_demo_model_path(sys.argv[1]))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert outputs == {str(tmp_path / "demo-qwen2-v2")}
    assert [p.name for p in tmp_path.iterdir()] == ["demo-qwen2-v2"]  # no temp directories left behind
    assert load_file(str(tmp_path / "demo-qwen2-v2" / "model.safetensors"))["model.norm.weight"].shape == (128,)


def test_demo_tokenizer_loads_without_warnings(tmp_path):
    """config.json records transformers_version: without it transformers 5.0-5.17 take the directory for an
    old Mistral checkpoint and warn about an incorrect regex pattern (fix_mistral_regex) at every start."""
    path = get_demo_model_path(tmp_path)
    assert json.loads(Path(path, "config.json").read_text())["transformers_version"]
    code = "import sys; from sgl_runtime.tokenizer_utils import load_tokenizer; load_tokenizer(sys.argv[1])"
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "warn" not in result.stderr.lower() and "regex" not in result.stderr, (
        result.stderr
    )
