"""Maps a config.json `architectures` entry to the project's model class."""

from __future__ import annotations

from typing import Sequence

from torch import nn

from sgl_runtime.models.llama import LlamaForCausalLM, MistralForCausalLM
from sgl_runtime.models.mixtral import MixtralForCausalLM
from sgl_runtime.models.qwen2 import Qwen2ForCausalLM
from sgl_runtime.models.qwen3 import Qwen3ForCausalLM
from sgl_runtime.models.qwen3_moe import Qwen3MoeForCausalLM

MODEL_REGISTRY: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": MistralForCausalLM,
    "MixtralForCausalLM": MixtralForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
}


def supported_architectures() -> list[str]:
    return sorted(MODEL_REGISTRY)


def get_model_class(architectures: Sequence[str] | None) -> type[nn.Module]:
    """The class for the first supported entry of `architectures`; ValueError naming the supported ones."""
    for arch in architectures or ():
        if arch in MODEL_REGISTRY:
            return MODEL_REGISTRY[arch]
    raise ValueError(
        f"unsupported model architecture {list(architectures or [])}; supported: {', '.join(supported_architectures())}"
    )
