"""The built-in demo checkpoint: a small random-weight Qwen2 with the real Qwen2.5 tokenizer, built once and cached.

Weights come from a fixed seed, so every machine builds the same model. Its free text is noise;
constrained outputs are still valid. Built into a temporary directory and renamed into place, so
concurrent first use by several processes is safe.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import torch

from sgl_runtime.model_loader.demo_tokenizer import default_cache_dir, get_qwen2_tokenizer_dir

# v2: config.json records transformers_version (transformers 5.0-5.17 take a local config.json without it
# for a pre-5.0 Mistral checkpoint and warn about an "incorrect regex pattern" / fix_mistral_regex).
DEMO_NAME = "demo-qwen2-v2"
DEMO_SEED = 1234
DEMO_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "torch_dtype": "float32",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
GENERATION_CONFIG = {"eos_token_id": [151645, 151643], "bos_token_id": 151643}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def get_demo_model_path(cache_dir: Optional[str | os.PathLike] = None) -> str:
    """The cached demo checkpoint directory, built deterministically on first use."""
    root = Path(cache_dir or default_cache_dir())
    final = root / DEMO_NAME
    if (final / "config.json").exists():
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEMO_NAME}-", dir=root))
    try:
        write_demo_checkpoint(tmp, tokenizer_dir=get_qwen2_tokenizer_dir())
        try:
            os.rename(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(final)


def write_demo_checkpoint(out: Path, tokenizer_dir: Path) -> None:
    from safetensors.torch import save_file

    save_file(demo_state_dict(), str(out / "model.safetensors"), metadata={"format": "pt"})
    import transformers

    config = {**DEMO_CONFIG, "transformers_version": transformers.__version__}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    for name in TOKENIZER_FILES:
        shutil.copyfile(Path(tokenizer_dir) / name, out / name)


def demo_state_dict() -> dict[str, torch.Tensor]:
    """HF-named float32 weights drawn in a fixed order from one seeded generator (normal, std 0.02)."""
    generator = torch.Generator().manual_seed(DEMO_SEED)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in _demo_shapes():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = torch.randn(shape, generator=generator) * 0.02
    return tensors


def _demo_shapes() -> list[tuple[str, tuple[int, ...]]]:
    c = DEMO_CONFIG
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    head_dim = hidden // c["num_attention_heads"]
    q_size, kv_size = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    shapes = [("model.embed_tokens.weight", (c["vocab_size"], hidden))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (hidden,)),
            (p + "self_attn.q_proj.weight", (q_size, hidden)),
            (p + "self_attn.q_proj.bias", (q_size,)),
            (p + "self_attn.k_proj.weight", (kv_size, hidden)),
            (p + "self_attn.k_proj.bias", (kv_size,)),
            (p + "self_attn.v_proj.weight", (kv_size, hidden)),
            (p + "self_attn.v_proj.bias", (kv_size,)),
            (p + "self_attn.o_proj.weight", (hidden, q_size)),
            (p + "post_attention_layernorm.weight", (hidden,)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
        ]
    shapes.append(("model.norm.weight", (hidden,)))
    return shapes
