"""The model's shape, dtype, context length and EOS ids, resolved from a local checkpoint directory."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from sgl_runtime.tokenizer_utils import read_checkpoint_eos_ids, read_tokenizer_eos_ids

logger = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "half": torch.float16,
    "float": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
CPU_DTYPES = (torch.float32, torch.bfloat16)
# config.json key of explicit per-frequency rope factors (a GGUF's rope_freqs tensor, written at conversion)
ROPE_FREQ_FACTORS_KEY = "rope_freq_factors"


def load_hf_config(model_path: str):
    """config.json as a transformers config object (a generic one for model types transformers lacks)."""
    from transformers import AutoConfig, PretrainedConfig

    config_file = os.path.join(model_path, "config.json")
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"{model_path!r} is not a model directory: config.json is missing")
    try:
        return AutoConfig.from_pretrained(model_path, local_files_only=True)
    except (ValueError, KeyError):
        with open(config_file, encoding="utf-8") as f:
            return PretrainedConfig(**json.load(f))


def rope_parameters(hf_config) -> dict[str, Any]:
    """rope_theta, rope_type and scaling fields, from transformers 5's rope_parameters or the older fields,
    plus the config's max_position_embeddings (dynamic NTK and YaRN read it) and, as `freq_factors`, the
    per-frequency factors a converted GGUF's config carries."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    factors = getattr(hf_config, ROPE_FREQ_FACTORS_KEY, None)
    if factors is not None:
        params["freq_factors"] = [float(f) for f in factors]
    legacy = getattr(hf_config, "rope_scaling", None)
    if legacy and not params.get("rope_type"):
        params.update(legacy)
    params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    params.setdefault("max_position_embeddings", _max_position_embeddings(hf_config))
    return params


def rope_context_limit(hf_config) -> int:
    """The longest context the rope config supports: max_position_embeddings, extended by a linear or
    dynamic factor, or to YaRN's original_max_position_embeddings * factor (llama3 configs already state
    the extended length as max_position_embeddings, and so do GGUF files with rope_freqs factors: their
    context_length is the HF max_position_embeddings)."""
    params = rope_parameters(hf_config)
    max_pos = _max_position_embeddings(hf_config)
    rope_type = params["rope_type"]
    factor = float(params.get("factor") or 1.0)
    if rope_type in ("linear", "dynamic"):
        return max(max_pos, int(max_pos * factor))
    if rope_type == "yarn" and params.get("factor") is not None:
        original = int(params.get("original_max_position_embeddings") or max_pos)
        return max(max_pos, int(original * factor))
    return max_pos


def _max_position_embeddings(hf_config) -> int:
    return int(getattr(hf_config, "max_position_embeddings", 0) or 2048)


def parse_dtype(name: Union[str, torch.dtype]) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    key = str(name).replace("torch.", "")
    if key not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; use one of float32, float16, bfloat16")
    return _DTYPES[key]


def resolve_dtype(requested: Union[str, torch.dtype], config_dtype: Optional[str], device: str) -> torch.dtype:
    """'auto' follows the checkpoint's dtype (float16 becomes float32 on CPU); CPU runs float32 or bfloat16."""
    on_cpu = str(device).startswith("cpu")
    if requested == "auto":
        if config_dtype is None:
            return torch.float32 if on_cpu else torch.bfloat16
        dtype = parse_dtype(config_dtype)
        return torch.float32 if on_cpu and dtype == torch.float16 else dtype
    dtype = parse_dtype(requested)
    if on_cpu and dtype not in CPU_DTYPES:
        raise ValueError(f"dtype {dtype} is not supported on CPU; use float32 or bfloat16")
    return dtype


@dataclass
class ModelConfig:
    model_path: str
    hf_config: Any
    dtype: torch.dtype
    context_length: int
    eos_token_ids: set[int]

    @staticmethod
    def from_path(
        path: str, dtype: Union[str, torch.dtype] = "auto", context_length: Optional[int] = None, device: str = "cpu"
    ) -> "ModelConfig":
        hf_config = load_hf_config(path)
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            raw = json.load(f)
        config_dtype = raw.get("torch_dtype") or raw.get("dtype")
        eos = read_checkpoint_eos_ids(path) | read_tokenizer_eos_ids(path)
        return ModelConfig(
            model_path=path,
            hf_config=hf_config,
            dtype=resolve_dtype(dtype, config_dtype, device),
            context_length=_resolve_context_length(hf_config, context_length),
            eos_token_ids=eos,
        )

    @property
    def architectures(self) -> list[str]:
        return list(getattr(self.hf_config, "architectures", None) or [])

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config.vocab_size)

    @property
    def hidden_size(self) -> int:
        return int(self.hf_config.hidden_size)

    @property
    def num_layers(self) -> int:
        return int(self.hf_config.num_hidden_layers)

    @property
    def num_attention_heads(self) -> int:
        return int(self.hf_config.num_attention_heads)

    @property
    def num_kv_heads(self) -> int:
        return int(getattr(self.hf_config, "num_key_value_heads", None) or self.num_attention_heads)

    @property
    def head_dim(self) -> int:
        return head_dim_of(self.hf_config)


def head_dim_of(hf_config) -> int:
    explicit = getattr(hf_config, "head_dim", None)
    return int(explicit) if explicit else hf_config.hidden_size // hf_config.num_attention_heads


def sliding_window_of(hf_config) -> Optional[int]:
    if not getattr(hf_config, "use_sliding_window", True):
        return None
    return getattr(hf_config, "sliding_window", None)


def _resolve_context_length(hf_config, requested: Optional[int]) -> int:
    """The model's max_position_embeddings by default; an override may reach what the rope config supports."""
    model_max = _max_position_embeddings(hf_config)
    rope_limit = rope_context_limit(hf_config)
    # The attention backends attend to the whole sequence; a sliding-window model (Mistral v0.1) is exact
    # only while sequences fit in the window, so the window caps the context length.
    window = sliding_window_of(hf_config)
    if window and window < rope_limit:
        logger.info("sliding window %d caps the context length (model max %d)", window, rope_limit)
        model_max, rope_limit = min(model_max, int(window)), int(window)
    if requested is None:
        return model_max
    if requested <= 0:
        raise ValueError(f"context_length must be positive, got {requested}")
    if requested > rope_limit:
        raise ValueError(
            f"context_length={requested} exceeds the model's maximum of {rope_limit} tokens"
            f" ({_rope_limit_reason(hf_config, window)})"
        )
    return int(requested)


def _rope_limit_reason(hf_config, window: Optional[int]) -> str:
    if window and window < rope_context_limit(hf_config):
        return f"sliding window {window}; full attention is exact only within it"
    params = rope_parameters(hf_config)
    max_pos = _max_position_embeddings(hf_config)
    if params["rope_type"] in ("default", "llama3"):
        factors = " and the GGUF's rope_freqs factors" if "freq_factors" in params else ""
        return (
            f"max_position_embeddings={max_pos} with rope_type {params['rope_type']!r}{factors}; a rope_scaling"
            " config (yarn, linear, dynamic) in config.json extends it"
        )
    return f"max_position_embeddings={max_pos} extended by rope_type {params['rope_type']!r}"
