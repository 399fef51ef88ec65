"""Qwen2 / Qwen2.5: Llama's layer with a bias on the q/k/v projections (tied embeddings come from the config)."""

from __future__ import annotations

from sgl_runtime.models.llama import LayerOptions, LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    @classmethod
    def layer_options(cls, config) -> LayerOptions:
        return LayerOptions(qkv_bias=True)
