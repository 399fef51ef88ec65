"""Llama 2/3/3.1 (also Mistral, and the base that Qwen2/Qwen3 configure): decoder layers over RadixAttention.

One decoder-layer shape serves every supported architecture; subclasses only set options
(`qkv_bias`, `qk_norm`). Sliding-window attention (Mistral v0.1) is not implemented: ModelConfig
caps the context length at the window, where full attention is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
from torch import nn

from sgl_runtime.forward_batch import ForwardBatch
from sgl_runtime.kernels import fusion
from sgl_runtime.layers.activation import SiluAndMul
from sgl_runtime.layers.layernorm import RMSNorm
from sgl_runtime.layers.linear import read_shard
from sgl_runtime.layers.radix_attention import RadixAttention
from sgl_runtime.layers.rotary_embedding import RotaryEmbedding
from sgl_runtime.model_config import head_dim_of, rope_parameters


@dataclass(frozen=True)
class LayerOptions:
    qkv_bias: bool = False
    qk_norm: bool = False


class LlamaAttention(nn.Module):
    def __init__(self, config, layer_id: int, options: LayerOptions):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim = head_dim_of(config)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=options.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=False)
        self.qk_norm = options.qk_norm
        if options.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.attn = RadixAttention(self.num_heads, self.head_dim, self.head_dim**-0.5, self.num_kv_heads, layer_id)

    def shard_offsets(self) -> dict[str, tuple[int, int]]:
        """Where q, k and v sit in the merged qkv_proj output rows: shard -> (offset, size)."""
        return {
            "q": (0, self.q_size),
            "k": (self.q_size, self.kv_size),
            "v": (self.q_size + self.kv_size, self.kv_size),
        }

    def forward(
        self, hidden: torch.Tensor, cos_sin, rotary: RotaryEmbedding, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden)  # [T, (H + 2*Hkv) * D]
        if fusion.use_fused_kernels(qkv):
            q, k, v = self._rotated_in_place(qkv, cos_sin, rotary)
        else:
            q, k, v = self._rotated(qkv, cos_sin, rotary)
        out = self.attn(q, k, v, forward_batch)  # [T, H*D]
        return self.o_proj(out)

    def _rotated(self, qkv: torch.Tensor, cos_sin, rotary: RotaryEmbedding):
        """The exact torch path: split, optional q/k norm, rotate into new tensors."""
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)  # [T, H*D], [T, Hkv*D] x2
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.num_heads, self.head_dim))  # [T, H, D]
            k = self.k_norm(k.reshape(-1, self.num_kv_heads, self.head_dim))  # [T, Hkv, D]
        q, k = rotary.rotate(q, cos_sin), rotary.rotate(k, cos_sin)
        return q.reshape(-1, self.q_size), k.reshape(-1, self.kv_size), v

    def _rotated_in_place(self, qkv: torch.Tensor, cos_sin, rotary: RotaryEmbedding):
        """Fused path: q and k heads sit side by side in each qkv row, so one in-place kernel rotates
        both, and q, k, v stay strided views of qkv (the attention kernels take strided rows)."""
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)  # views, row stride of qkv
        if self.qk_norm:  # the norms write new dense tensors; rotate those in place
            q = rotary.rotate_(self.q_norm(q.unflatten(-1, (self.num_heads, self.head_dim))), cos_sin)
            k = rotary.rotate_(self.k_norm(k.unflatten(-1, (self.num_kv_heads, self.head_dim))), cos_sin)
            return q.flatten(1), k.flatten(1), v
        qk = qkv[:, : self.q_size + self.kv_size].unflatten(-1, (self.num_heads + self.num_kv_heads, self.head_dim))
        rotary.rotate_(qk, cos_sin)  # [T, H + Hkv, D], in place
        return q, k, v


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = SiluAndMul()

    def shard_offsets(self) -> dict[str, tuple[int, int]]:
        return {"gate": (0, self.intermediate_size), "up": (self.intermediate_size, self.intermediate_size)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))  # [T, 2I] -> [T, I] -> [T, hidden]


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_id: int, options: LayerOptions):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_id, options)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin,
        rotary: RotaryEmbedding,
        forward_batch: ForwardBatch,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, residual) -> (this layer's MLP output, the running residual); their sum is the HF hidden state."""
        if residual is None:  # first layer: the embeddings are the residual
            hidden, residual = self.input_layernorm(hidden), hidden
        else:
            hidden, residual = self.input_layernorm(hidden, residual)  # residual += hidden; norm (one kernel on CUDA)
        hidden = self.self_attn(hidden, cos_sin, rotary, forward_batch)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaModel(nn.Module):
    def __init__(self, config, options: LayerOptions):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary_emb = RotaryEmbedding(head_dim_of(config), rope_parameters(config))
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i, options) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = self.embed_tokens(input_ids)  # [T, hidden]
        cos_sin = self.rotary_emb.cos_sin(positions)  # once per forward, shared by the layers
        residual = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, cos_sin, self.rotary_emb, forward_batch)
        return hidden, residual  # [T, hidden] each; their sum goes into the final norm


class LlamaForCausalLM(nn.Module):
    """HF weight names map onto merged qkv_proj / gate_up_proj rows (see `stacked_params`)."""

    # (merged param, HF name, shard)
    stacked_params = (
        (".qkv_proj", ".q_proj", "q"),
        (".qkv_proj", ".k_proj", "k"),
        (".qkv_proj", ".v_proj", "v"),
        (".gate_up_proj", ".gate_proj", "gate"),
        (".gate_up_proj", ".up_proj", "up"),
    )

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, self.layer_options(config))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    @classmethod
    def layer_options(cls, config) -> LayerOptions:
        return LayerOptions(qkv_bias=bool(getattr(config, "attention_bias", False)))

    @property
    def tied_embeddings(self) -> bool:
        return bool(getattr(self.config, "tie_word_embeddings", False))

    def tie_weights(self) -> None:
        if self.tied_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch) -> torch.Tensor:
        hidden, residual = self.model(input_ids, positions, forward_batch)  # [T, hidden] each
        rows = forward_batch.logits_indices
        if residual is None:  # a model without layers
            hidden = self.model.norm(hidden[rows])  # [L, hidden]
        else:
            hidden, _ = self.model.norm(hidden[rows], residual[rows])  # [L, hidden]
        return self.lm_head(hidden).float()  # [L, vocab]

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy HF-named tensors into the parameters; returns the names of the parameters written. A tensor
        may be a safetensors slice: a tensor-parallel layer (see models/tensor_parallel.py) reads only its
        rank's part of it."""
        params = dict(self.named_parameters())
        shards_seen: dict[str, set[str]] = {}
        for name, tensor in weights:
            if "rotary_emb.inv_freq" in name or (self.tied_embeddings and name == "lm_head.weight"):
                continue
            param_name, shard = self._locate(name, params)
            target = params[param_name]
            if shard is not None:
                target = target.narrow(0, *self._shard_offsets(param_name)[shard])
            module_name, _, param = param_name.rpartition(".")
            _copy_checked(name, target, read_shard(self.get_submodule(module_name), param, shard, tensor))
            shards_seen.setdefault(param_name, set()).add(shard)
        # A merged parameter counts as loaded only once all of its shards were.
        return {name for name, seen in shards_seen.items() if None in seen or seen == set(self._shard_offsets(name))}

    def _shard_offsets(self, param_name: str) -> dict[str, tuple[int, int]]:
        return self.get_submodule(param_name.rsplit(".", 2)[0]).shard_offsets()

    def _locate(self, name: str, params: dict[str, nn.Parameter]) -> tuple[str, str | None]:
        """The parameter a checkpoint tensor goes to, and its shard within a merged parameter (else None)."""
        for merged, hf_name, shard in self.stacked_params:
            if hf_name in name and name.replace(hf_name, merged) in params:
                return name.replace(hf_name, merged), shard
        if name not in params:
            raise ValueError(f"checkpoint tensor {name!r} has no matching parameter in {type(self).__name__}")
        return name, None


def _copy_checked(name: str, target: torch.Tensor, tensor: torch.Tensor) -> None:
    if tuple(target.shape) != tuple(tensor.shape):
        raise ValueError(f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}")
    target.copy_(tensor)


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral is Llama's architecture (its sliding window is handled by the context-length cap)."""
