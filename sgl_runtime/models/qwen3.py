"""Qwen3: Llama's layer with a per-head RMSNorm on q and k before rotary embedding."""

from __future__ import annotations

from sgl_runtime.models.llama import LayerOptions, LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    @classmethod
    def layer_options(cls, config) -> LayerOptions:
        return LayerOptions(qkv_bias=bool(getattr(config, "attention_bias", False)), qk_norm=True)
