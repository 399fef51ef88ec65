"""Shared test fixtures: tiny random HF checkpoints for every supported architecture, and a harness that
drives a model through the KV pools + TorchAttentionBackend with hand-built ForwardBatches.

Checkpoints keep vocab_size 151936 (the Qwen2.5 tokenizer has 151,665 tokens, so any encoded prompt
is a valid id) and make everything else tiny (hidden 64, 2 layers) so they build and run in a second.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional, Sequence

import torch

from sgl_runtime.forward_batch import ForwardBatch, ForwardMode
from sgl_runtime.layers.attention.torch_backend import TorchAttentionBackend
from sgl_runtime.mem_cache.memory_pool import ReqToTokenPool, TokenToKVPool
from sgl_runtime.model_config import head_dim_of
from sgl_runtime.model_loader.demo_tokenizer import get_qwen2_tokenizer_dir

TINY_VOCAB = 151936
_COMMON = dict(
    vocab_size=TINY_VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    bos_token_id=151643,
    eos_token_id=151645,
)
# name -> (architecture, config overrides)
TINY_ARCHS: dict[str, tuple[str, dict]] = {
    "llama3": (
        "LlamaForCausalLM",
        dict(
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
    ),
    "llama2": ("LlamaForCausalLM", dict(rope_theta=10000.0, num_key_value_heads=4)),
    "mistral": ("MistralForCausalLM", dict(rope_theta=1000000.0, sliding_window=256)),
    "qwen2": ("Qwen2ForCausalLM", dict(rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3": ("Qwen3ForCausalLM", dict(rope_theta=1000000.0, head_dim=32, tie_word_embeddings=False)),
    # layer 1 keeps a dense MLP (mlp_only_layers), layers 0 and 2 are sparse
    "qwen3_moe": (
        "Qwen3MoeForCausalLM",
        dict(
            rope_theta=1000000.0,
            head_dim=16,
            num_hidden_layers=3,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            mlp_only_layers=[1],
            norm_topk_prob=True,
            tie_word_embeddings=False,
        ),
    ),
    "mixtral": (
        "MixtralForCausalLM",
        dict(
            rope_theta=1000000.0, num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, sliding_window=None
        ),
    ),
}
ARCH_NAMES = tuple(TINY_ARCHS)


def make_tiny_checkpoint(arch: str, path, sharded: bool = False, seed: int = 0, **overrides) -> str:
    """Save a tiny random HF model (float32 safetensors + Qwen2.5 tokenizer files) to `path`; returns it.

    `arch` is a TINY_ARCHS key ("llama3", "llama2", "mistral", "qwen2", "qwen3") or an architecture name.
    """
    import transformers

    architecture, arch_overrides = _resolve_arch(arch)
    config_class = getattr(transformers, architecture.replace("ForCausalLM", "Config"))
    config = config_class(**{**_COMMON, **arch_overrides, **overrides})
    config.architectures = [architecture]
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config).to(torch.float32)
    _randomize(model, seed)
    out = Path(path)
    model.save_pretrained(str(out), safe_serialization=True, max_shard_size="2MB" if sharded else "10GB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(get_qwen2_tokenizer_dir() / name, out / name)
    return str(out)


def _resolve_arch(arch: str) -> tuple[str, dict]:
    if arch in TINY_ARCHS:
        return TINY_ARCHS[arch]
    for architecture, overrides in TINY_ARCHS.values():
        if architecture == arch:
            return architecture, overrides
    raise KeyError(f"no tiny checkpoint recipe for {arch!r}; known: {sorted(TINY_ARCHS)}")


@torch.no_grad()
def _randomize(model, seed: int) -> None:
    """Larger-than-default random weights so logits are O(1) and a wrong weight shows up in the comparison."""
    generator = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        noise = torch.randn(param.shape, generator=generator)
        if name.endswith("norm.weight"):
            param.copy_(1.0 + 0.2 * noise)
        elif name.endswith("embed_tokens.weight"):
            param.copy_(noise)
        else:
            param.copy_(noise * 0.5 / param.shape[-1] ** 0.5)


def hf_reference_logits(path: str, token_ids: Sequence[int]) -> torch.Tensor:
    """transformers' float32 logits [len, vocab] for one unpadded sequence."""
    model = _hf_model(path)
    with torch.no_grad():
        return model(torch.tensor([list(token_ids)])).logits[0].float()


_HF_MODELS: dict[str, object] = {}


def _hf_model(path: str):
    from transformers import AutoModelForCausalLM

    if path not in _HF_MODELS:
        _HF_MODELS[path] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return _HF_MODELS[path]


class ForwardHarness:
    """Pools + torch backend around a loaded model; `run_forward` plays the model runner's part."""

    def __init__(
        self,
        model,
        max_reqs: int = 8,
        max_tokens: int = 1024,
        max_context: int = 512,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
    ):
        config = model.config
        self.model = model
        self.device = device
        self.req_pool = ReqToTokenPool(max_reqs, max_context, device)
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        self.kv_pool = TokenToKVPool(max_tokens, dtype, kv_heads, head_dim_of(config), config.num_hidden_layers, device)
        self.backend = TorchAttentionBackend(self.kv_pool, self.req_pool)

    def new_request(self) -> int:
        return self.req_pool.alloc(1)[0]

    def share_prefix(self, src_slot: int, dst_slot: int, length: int) -> None:
        """Point dst's first `length` positions at src's KV slots (what a radix-cache hit does)."""
        self.req_pool.req_to_token[dst_slot, :length] = self.req_pool.req_to_token[src_slot, :length]

    def run_forward(
        self,
        reqs: Sequence[tuple[int, int, Sequence[int]]],
        mode: ForwardMode = ForwardMode.EXTEND,
        all_logits: bool = True,
    ) -> list[torch.Tensor]:
        """reqs: (request slot, prefix_len, new token ids). Returns per request its logits [E, vocab]
        (every new token when all_logits, else only the last)."""
        batch = self.build_batch(reqs, mode, all_logits)
        logits = self.model(batch.input_ids, batch.positions, batch)
        return list(logits.split([len(ids) if all_logits else 1 for _, _, ids in reqs]))

    def build_batch(self, reqs, mode: ForwardMode, all_logits: bool) -> ForwardBatch:
        prefix = [p for _, p, _ in reqs]
        extend = [len(ids) for _, _, ids in reqs]
        out_cache_loc = self.kv_pool.alloc(sum(extend))
        assert out_cache_loc is not None, "KV pool exhausted in test harness"
        starts, positions, offset = [], [], 0
        for (slot, p, ids), loc_start in zip(reqs, _cumsum(extend)):
            self.req_pool.req_to_token[slot, p : p + len(ids)] = out_cache_loc[loc_start : loc_start + len(ids)].int()
            starts.append(offset)
            positions += list(range(p, p + len(ids)))
            offset += len(ids)
        ends = [s + e for s, e in zip(starts, extend)]
        logits_indices = list(range(offset)) if all_logits else [e - 1 for e in ends]
        t = lambda xs: torch.tensor(xs, dtype=torch.int64, device=self.device)  # noqa: E731
        return ForwardBatch(
            forward_mode=mode,
            batch_size=len(reqs),
            input_ids=t([tok for _, _, ids in reqs for tok in ids]),
            positions=t(positions),
            req_pool_indices=t([slot for slot, _, _ in reqs]),
            seq_lens=t([p + e for p, e in zip(prefix, extend)]),
            extend_prefix_lens=t(prefix),
            extend_seq_lens=t(extend),
            extend_start_loc=t(starts),
            out_cache_loc=out_cache_loc,
            seq_lens_cpu=[p + e for p, e in zip(prefix, extend)],
            extend_prefix_lens_cpu=prefix,
            extend_seq_lens_cpu=extend,
            logits_indices=t(logits_indices),
            logits_indices_cpu=logits_indices,
            attn_backend=self.backend,
            req_to_token=self.req_pool.req_to_token,
        )


def _cumsum(values: Sequence[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        out.append(total)
        total += v
    return out


def load_for_test(path: str, dtype: torch.dtype = torch.float32, harness_kwargs: Optional[dict] = None):
    """(model, harness) for a checkpoint directory, through the real loader."""
    from sgl_runtime.model_loader.loader import load_model

    model = load_model(path, dtype, "cpu")
    return model, ForwardHarness(model, dtype=dtype, **(harness_kwargs or {}))


def expert_shards(w13: torch.Tensor, w2: torch.Tensor, tp_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each tensor-parallel rank's (w13, w2) of stacked experts w13 [E, 2I, H], w2 [E, H, I], loaded one
    expert matrix at a time through FusedMoE.weight_loader as a checkpoint's would be."""
    from sgl_runtime.distributed.parallel_state import TPGroup
    from sgl_runtime.layers.moe import FusedMoE

    experts, two_inter, hidden = w13.shape
    inter = two_inter // 2
    shards = []
    for rank in range(tp_size):
        module = FusedMoE(experts, 1, hidden, inter, False, TPGroup(rank=rank, size=tp_size, device="cpu"))
        module.to(w13.dtype)
        for e in range(experts):
            module.weight_loader(w13[e, :inter].cpu(), e, "gate")
            module.weight_loader(w13[e, inter:].cpu(), e, "up")
            module.weight_loader(w2[e].cpu(), e, "down")
        shards.append((module.w13_weight.data.to(w13.device), module.w2_weight.data.to(w2.device)))
    return shards
