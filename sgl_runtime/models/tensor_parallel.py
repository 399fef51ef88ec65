"""Tensor parallelism as a transform of a built model (gpt-fast's apply_tp): the Llama-family layers'
projections become column/row-parallel, the embedding and LM head vocabulary-parallel, each
attention layer keeps its rank's heads (KV heads replicated when there are fewer than ranks), and
each MoE layer's experts keep their rank's slice of the intermediate dimension (router replicated)."""

from __future__ import annotations

from torch import nn

from sgl_runtime.distributed.parallel_state import TPGroup
from sgl_runtime.layers.linear import (
    ColumnParallelLinear,
    ParallelLMHead,
    RowParallelLinear,
    Shard,
    VocabParallelEmbedding,
)
from sgl_runtime.layers.moe import FusedMoE, SparseMoeBlock
from sgl_runtime.models.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP


def apply_tp(model: nn.Module, tp: TPGroup) -> nn.Module:
    """Shard `model` (built, weights not loaded yet, e.g. on the meta device) for rank tp.rank of tp.size."""
    if not isinstance(model, LlamaForCausalLM):
        raise ValueError(f"{type(model).__name__} does not support tensor parallelism (tp_size > 1)")
    hidden = model.config.hidden_size
    for layer in model.model.layers:
        _shard_attention(layer.self_attn, hidden, tp)
        if isinstance(layer.mlp, LlamaMLP):
            _shard_mlp(layer.mlp, hidden, tp)
        elif isinstance(layer.mlp, SparseMoeBlock):
            _shard_experts(layer.mlp, tp)
        else:
            raise ValueError(f"{type(layer.mlp).__name__} layers do not support tensor parallelism (tp_size > 1)")
    model.model.embed_tokens = VocabParallelEmbedding(model.config.vocab_size, hidden, tp)
    model.lm_head = ParallelLMHead(model.config.vocab_size, hidden, tp)
    model.tie_weights()
    return model


def _shard_attention(attn: LlamaAttention, hidden: int, tp: TPGroup) -> None:
    heads, kv_heads, head_dim = attn.num_heads, attn.num_kv_heads, attn.head_dim
    if heads % tp.size or (kv_heads % tp.size and tp.size % kv_heads):
        raise ValueError(f"tp_size {tp.size} does not split {heads} attention / {kv_heads} KV heads")
    shards = [Shard("q", heads, head_dim), Shard("k", kv_heads, head_dim), Shard("v", kv_heads, head_dim)]
    attn.qkv_proj = ColumnParallelLinear(hidden, shards, attn.qkv_proj.bias is not None, tp)
    attn.o_proj = RowParallelLinear(heads * head_dim, hidden, attn.o_proj.bias is not None, tp)
    attn.num_heads, attn.num_kv_heads = heads // tp.size, shards[1].local_units(tp.size)
    attn.q_size, attn.kv_size = attn.num_heads * head_dim, attn.num_kv_heads * head_dim
    attn.attn.num_heads, attn.attn.num_kv_heads = attn.num_heads, attn.num_kv_heads


def _shard_mlp(mlp: LlamaMLP, hidden: int, tp: TPGroup) -> None:
    size = mlp.intermediate_size
    if size % tp.size:
        raise ValueError(f"tp_size {tp.size} does not divide the intermediate size {size}")
    mlp.gate_up_proj = ColumnParallelLinear(hidden, [Shard("gate", size, 1), Shard("up", size, 1)], False, tp)
    mlp.down_proj = RowParallelLinear(size, hidden, False, tp)
    mlp.intermediate_size = size // tp.size


def _shard_experts(block: SparseMoeBlock, tp: TPGroup) -> None:
    """Tensor parallelism inside every expert (not expert parallelism): each rank holds all E experts'
    gate/up rows and down columns for its 1/N of the intermediate dimension; one all-reduce per layer."""
    e = block.experts
    block.experts = FusedMoE(e.num_experts, e.top_k, e.hidden_size, e.full_intermediate_size, e.renormalize, tp)
