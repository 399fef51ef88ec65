"""Writes small GGUF files with gguf.GGUFWriter, as llama.cpp's converter lays them out: a tiny random HF
model (Llama, Qwen2 or Qwen3) with its tensors renamed by gguf's TensorNameMap, Llama's q/k rows
permuted, each matrix stored in a chosen quant type, and a small byte-level BPE tokenizer.

Types gguf can quantize (Q8_0, Q4_0, Q4_1, BF16, F16) go through gguf.quants.quantize. gguf has no
quantizer for the K-quants, so Q4_K and Q6_K tensors are random blocks whose fp16 scale fields are set
to small values (the rest of a K-quant block is any bit pattern); both loaders then read the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LETTERS = "etaoinsrhl"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# (GGUF architecture, HF model class, config overrides)
LAYOUTS = {
    "llama": ("LlamaForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)),
    "qwen2": ("Qwen2ForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)),
    # head_dim 128 != hidden / heads: the head size has to come from attention.key_length.
    "qwen3": (
        "Qwen3ForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False),
    ),
}


def byte_level_vocab() -> tuple[list[str], list[str]]:
    """GPT-2's 256 byte symbols, merges of common letter pairs (and of 'Ġ' + letter), then the specials."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = list(bytes_to_unicode().values())
    merges = [f"{a} {b}" for a in LETTERS for b in LETTERS] + [f"Ġ {a}" for a in LETTERS]
    tokens += [m.replace(" ", "") for m in merges]
    return tokens + SPECIALS, merges


def write_tiny_gguf(path, arch: str, qtypes: dict[str, Q], seed: int = 0) -> str:
    """A tiny random `arch` model as GGUF at `path`; `qtypes` maps a GGUF tensor-name fragment ("attn_q",
    "ffn_down", "token_embd", ...) to its storage type (F32 for the rest). Returns the path."""
    model, _ = tiny_hf_model(arch, seed)
    return write_gguf(path, arch, model, qtypes, seed)


def write_gguf(
    path, arch: str, model, qtypes: dict[str, Q], seed: int = 0, extra_tensors=None, extra_metadata=None
) -> str:
    """`model` (an HF model of `arch` over byte_level_vocab) as GGUF at `path`, plus `extra_tensors`
    ({GGUF name: float32 array}, e.g. rope_freqs) written as F32 and `extra_metadata` ({key: str, int or
    float}, "{arch}" formatted in the key; ints as uint32, floats as float32). Returns the path."""
    config = model.config
    tokens, merges = byte_level_vocab()
    writer = gguf.GGUFWriter(str(path), arch)
    _add_metadata(writer, config, tokens, merges)
    for key, value in (extra_metadata or {}).items():
        add = {str: writer.add_string, int: writer.add_uint32, float: writer.add_float32}[type(value)]
        add(key.format(arch=arch), value)
    for name, data in (extra_tensors or {}).items():
        writer.add_tensor(name, np.asarray(data, dtype=np.float32))
    name_map = gguf.get_tensor_name_map(
        next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), config.num_hidden_layers
    )
    for hf_name, tensor in model.state_dict().items():
        if config.tie_word_embeddings and hf_name == "lm_head.weight":
            continue
        base, _, suffix = hf_name.rpartition(".")
        name = f"{name_map.get_name(base)}.{suffix}"
        data = tensor.float().numpy()
        if arch == "llama" and ".attn_q." in name:
            data = permute_like_llama_cpp(data, config.num_attention_heads)
        elif arch == "llama" and ".attn_k." in name:
            data = permute_like_llama_cpp(data, config.num_key_value_heads)
        qtype = next((t for frag, t in qtypes.items() if f"{frag}." in name), Q.F32) if data.ndim == 2 else Q.F32
        _add_tensor(writer, name, data, qtype, np.random.default_rng(seed + len(name)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def permute_like_llama_cpp(weights: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute (rows [H, 2, D/2] -> [H, D/2, 2])."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def tiny_hf_model(arch: str, seed: int = 0, **config_overrides):
    """(random float32 HF model, its config) of `arch` over byte_level_vocab; `config_overrides` replace
    the tiny defaults (hidden_size 256, 2 layers, max_position_embeddings 512, rope_theta 10000, ...)."""
    import transformers

    class_name, overrides = LAYOUTS[arch]
    vocab = len(byte_level_vocab()[0])
    fields = dict(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=vocab - 2,
        eos_token_id=vocab - 1,
    )
    config = getattr(transformers, class_name.replace("ForCausalLM", "Config"))(
        **{**fields, **overrides, **config_overrides}
    )
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config).float()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * noise)
            elif "embed" in name:
                param.copy_(noise)
            else:
                param.copy_(noise * 0.5 / param.shape[-1] ** 0.5)
    return model, config


def _add_metadata(writer, config, tokens: list[str], merges: list[str]) -> None:
    writer.add_name("tiny")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)


def _add_tensor(writer, name: str, data: np.ndarray, qtype: Q, rng: np.random.Generator) -> None:
    if qtype == Q.F32:
        writer.add_tensor(name, data.astype(np.float32))
    elif qtype == Q.F16:
        writer.add_tensor(name, data.astype(np.float16))
    elif qtype in (Q.Q4_K, Q.Q6_K):
        writer.add_tensor(name, random_kquant_blocks(data.shape, qtype, rng), raw_dtype=qtype)
    else:
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def random_kquant_blocks(shape: tuple[int, int], qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Random Q4_K / Q6_K blocks for a [rows, cols] matrix, with fp16 scales that keep weights ~0.05."""
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    blocks = rng.integers(0, 256, size=(rows * cols // block_values, block_bytes), dtype=np.uint8)
    if qtype == Q.Q4_K:  # d, dmin (fp16) lead the block: w = d * scale * q - dmin * min
        blocks[:, 0:2] = np.full((len(blocks), 1), 1.5e-4, dtype=np.float16).view(np.uint8)
        blocks[:, 2:4] = np.full((len(blocks), 1), 1e-3, dtype=np.float16).view(np.uint8)
    else:  # Q6_K: d (fp16) ends the block: w = d * scale * (q - 32)
        blocks[:, -2:] = np.full((len(blocks), 1), 1e-5, dtype=np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


def transformers_gguf_model(gguf_file: str):
    """transformers' own GGUF loading of the file (float32, eval mode)."""
    from transformers import AutoModelForCausalLM

    path = Path(gguf_file)
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


def llama_cpp_rope_freqs(config) -> np.ndarray:
    """The rope_freqs factors llama.cpp's converter writes for a llama3 rope_scaling config: one per
    rotary frequency, 1 where the wavelength is short, `factor` where it is long, and in between the
    reciprocal of the smooth llama3 interpolation, so that llama.cpp's freq / factor_i is HF's frequency."""
    params = config.rope_parameters
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    freqs = 1.0 / (params["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old_context = params["original_max_position_embeddings"]
    factors = []
    for freq in freqs.astype(np.float32):
        wavelength = 2 * math.pi / float(freq)
        if wavelength < old_context / high:
            factors.append(1.0)
        elif wavelength > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelength - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def write_llama3_pair(
    directory, rope_scaling: dict, seed: int = 0, qk_scale: float = 1.0, **config_overrides
) -> tuple[str, str]:
    """(GGUF file, safetensors checkpoint directory) of one tiny random Llama with a llama3 rope_scaling:
    the checkpoint as save_pretrained writes it, the GGUF as llama.cpp converts it (q/k permuted, the
    rope_scaling dropped from the metadata and written as the rope_freqs tensor instead). `qk_scale`
    multiplies the q/k projections: sharper attention makes the logits depend more on the rotary angles."""
    directory = Path(directory)
    model, config = tiny_hf_model("llama", seed, rope_scaling=dict(rope_scaling), **config_overrides)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".q_proj." in name or ".k_proj." in name:
                param.mul_(qk_scale)
    model.save_pretrained(str(directory / "hf"))
    rope_freqs = llama_cpp_rope_freqs(config)
    gguf_file = write_gguf(directory / "llama3.gguf", "llama", model, {}, seed, {"rope_freqs.weight": rope_freqs})
    return gguf_file, str(directory / "hf")
