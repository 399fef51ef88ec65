"""Reads a GGUF file's weights as Hugging Face-named float tensors, dequantized by the `gguf` package.

Names are mapped with gguf's own TensorNameMap (HF name -> GGUF name, inverted over the parameters the
model asks for). llama.cpp's converter permutes the rows of Llama's q/k projections (its rotary kernel
pairs neighbouring dimensions, HF's pairs the two halves); `unpermute_qk` undoes that, as transformers'
GGUF loader does. Qwen2/Qwen3 files are written unpermuted. A rope_freqs tensor is no parameter: its
factors were read into config.json at conversion (gguf_checkpoint.rope_freq_factors).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np
import torch
from torch import nn

from sgl_runtime.model_config import ROPE_FREQ_FACTORS_KEY

logger = logging.getLogger(__name__)

TENSOR_INDEX_FILE = "gguf_tensors.json"
PERMUTED_QK_ARCHS = ("llama", "mistral")
ROPE_FREQS_TENSOR = "rope_freqs.weight"
# Tensors llama.cpp adds that are no parameter of the HF model (rope_freqs lives in the config).
IGNORED_TENSORS = (ROPE_FREQS_TENSOR,)


@dataclass(frozen=True)
class TensorEntry:
    """Where gguf's reader found one tensor: its GGML type, numpy-order shape and bytes in the file."""

    name: str
    qtype: int
    shape: tuple[int, ...]
    offset: int
    n_bytes: int


def open_gguf(gguf_file: str):
    """A gguf.GGUFReader over the file (memory-mapped); ValueError naming the file when it is not GGUF."""
    from gguf import GGUFReader

    try:
        return GGUFReader(gguf_file)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{gguf_file!r} is not a readable GGUF file: {exc}") from exc


def read_tensor_index(reader) -> tuple[str, list[TensorEntry]]:
    """(architecture, tensor entries) as gguf's reader parsed them."""
    arch = reader.fields["general.architecture"].contents()
    entries = [
        TensorEntry(
            t.name,
            int(t.tensor_type),
            tuple(int(d) for d in reversed(t.shape.tolist())),
            int(t.data_offset),
            int(t.n_bytes),
        )
        for t in reader.tensors
    ]
    return arch, entries


def write_tensor_index(reader, path: Path) -> None:
    """Saved at conversion: gguf's reader parses every metadata string (seconds for a 49k vocabulary),
    so later loads read this index and memory-map the tensor bytes instead."""
    arch, entries = read_tensor_index(reader)
    path.write_text(json.dumps({"architecture": arch, "tensors": [asdict(e) for e in entries]}))


def load_gguf_weights(model: nn.Module, gguf_file: str, index_file: Optional[str] = None) -> set[str]:
    """Copy every GGUF tensor into `model` (via its load_weights); returns the parameters written."""
    arch, entries = tensor_index(gguf_file, index_file)
    return model.load_weights(iter_gguf_weights(gguf_file, arch, entries, hf_weight_names(model), model.config))


def tensor_index(gguf_file: str, index_file: Optional[str] = None) -> tuple[str, list[TensorEntry]]:
    """(architecture, tensor entries): from the saved index when there is one, else from gguf's reader."""
    if index_file and os.path.isfile(index_file):
        data = json.loads(Path(index_file).read_text())
        return data["architecture"], [TensorEntry(**{**e, "shape": tuple(e["shape"])}) for e in data["tensors"]]
    return read_tensor_index(open_gguf(gguf_file))


def iter_gguf_weights(
    gguf_file: str, arch: str, entries: list[TensorEntry], hf_names: Iterable[str], hf_config
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, float32 tensor) for each GGUF tensor, dequantized by gguf.quants and in HF layout."""
    from gguf import GGMLQuantizationType, quants

    if any(e.name == ROPE_FREQS_TENSOR for e in entries) and getattr(hf_config, ROPE_FREQ_FACTORS_KEY, None) is None:
        raise ValueError(f"{gguf_file!r} carries rope_freqs but its converted config lacks {ROPE_FREQ_FACTORS_KEY}")
    names = gguf_to_hf_names(arch, int(hf_config.num_hidden_layers), hf_names)
    raw = np.memmap(gguf_file, dtype=np.uint8, mode="r")
    for entry in entries:
        if entry.name in IGNORED_TENSORS:
            continue
        hf_name = names.get(entry.name)
        if hf_name is None:
            raise ValueError(f"GGUF tensor {entry.name!r} of {gguf_file!r} has no parameter in the {arch} model")
        qtype = GGMLQuantizationType(entry.qtype)
        blocks = raw[entry.offset : entry.offset + entry.n_bytes].reshape(
            quants.quant_shape_to_byte_shape(entry.shape, qtype)
        )
        try:
            weights = quants.dequantize(blocks, qtype).reshape(entry.shape)
        except NotImplementedError as exc:
            raise ValueError(f"GGUF tensor {entry.name!r} uses {qtype.name}, which gguf cannot dequantize") from exc
        if arch in PERMUTED_QK_ARCHS and ".attn_q." in entry.name:
            weights = unpermute_qk(weights, hf_config.num_attention_heads)
        elif arch in PERMUTED_QK_ARCHS and ".attn_k." in entry.name:
            weights = unpermute_qk(weights, num_kv_heads(hf_config))
        yield hf_name, torch.from_numpy(np.array(weights, dtype=np.float32))  # a writable copy


def gguf_to_hf_names(arch: str, num_layers: int, hf_names: Iterable[str]) -> dict[str, str]:
    """GGUF tensor name -> HF parameter name, through gguf's TensorNameMap for `arch`."""
    import gguf

    arch_id = next((k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), None)
    if arch_id is None:
        raise ValueError(f"the gguf package does not know the architecture {arch!r}")
    name_map = gguf.get_tensor_name_map(arch_id, num_layers)
    mapping = {}
    for hf_name in hf_names:
        base, _, suffix = hf_name.rpartition(".")
        gguf_base = name_map.get_name(base)
        if gguf_base is not None:
            mapping[f"{gguf_base}.{suffix}"] = hf_name
    return mapping


def hf_weight_names(model: nn.Module) -> list[str]:
    """The HF checkpoint names the model loads: merged parameters expand to their shards' names."""
    names = []
    stacked = getattr(model, "stacked_params", ())
    for name, _ in model.named_parameters():
        parts = [name.replace(merged, hf) for merged, hf, _ in stacked if merged in name]
        names += parts or [name]
    names.append("lm_head.weight")  # skipped by load_weights when the embeddings are tied
    return sorted(set(names))


def unpermute_qk(weights: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: rows [H, D/2, 2] back to HF's [H, 2, D/2]."""
    half = weights.shape[0] // num_heads // 2
    return weights.reshape(num_heads, half, 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def num_kv_heads(hf_config) -> int:
    return int(getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads)
