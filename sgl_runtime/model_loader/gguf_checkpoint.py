"""Turns a GGUF file into a model directory the rest of the runtime reads like any checkpoint.

The directory (cached, keyed by the file's path, size and mtime) holds config.json and the tokenizer
(tokens, merges, special ids, chat template) converted from the GGUF metadata by transformers' own GGUF
code, generation_config.json with the EOS id, gguf_source.json naming the GGUF file, from which the
loader dequantizes the weights (gguf_loader.py), and gguf_tensors.json, gguf's index of the tensors. Converting the tokenizer takes tens of seconds (gguf's
reader parses every vocabulary string); every later start reads the cached directory and the index.
A Llama-3.1 file's rope_freqs tensor (llama3 rope scaling as one factor per frequency) goes into config.json
as rope_freq_factors, which the rotary embedding divides its frequencies by (`rope_freq_factors` says why).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

from sgl_runtime.model_config import ROPE_FREQ_FACTORS_KEY, head_dim_of
from sgl_runtime.model_loader.demo_tokenizer import default_cache_dir
from sgl_runtime.model_loader.gguf_loader import (
    ROPE_FREQS_TENSOR,
    TENSOR_INDEX_FILE,
    open_gguf,
    write_tensor_index,
)

logger = logging.getLogger(__name__)

GGUF_SOURCE_FILE = "gguf_source.json"
LAYOUT_VERSION = 4  # 3: rope_freq_factors from a rope_freqs tensor; 4: rope scaling from the metadata
# GGUF general.architecture -> our model class (architectures entry of config.json).
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


def find_gguf_file(path: str, force: bool = False) -> Optional[str]:
    """The GGUF file `path` names: the file itself, or the one *.gguf in a directory that holds no
    safetensors checkpoint (or any directory when `force`, i.e. --load-format gguf). None otherwise."""
    p = Path(path)
    if p.is_file():
        if p.suffix == ".gguf" or force:
            return str(p.resolve())
        return None
    if not p.is_dir():
        return None
    found = sorted(p.glob("*.gguf"))
    if not found:
        if force:
            raise FileNotFoundError(f"--load-format gguf: no *.gguf file in {path!r}")
        return None
    if not force and (p / "config.json").is_file() and any(p.glob("*.safetensors")):
        return None  # a regular checkpoint that also carries a GGUF export
    if len(found) > 1:
        names = ", ".join(f.name for f in found)
        raise ValueError(f"{path!r} holds several GGUF files ({names}); pass one of them as --model-path")
    return str(found[0].resolve())


def gguf_source_of(model_dir: str) -> Optional[str]:
    """The GGUF file a converted model directory was made from (None for other checkpoints)."""
    marker = Path(model_dir) / GGUF_SOURCE_FILE
    if not marker.is_file():
        return None
    return json.loads(marker.read_text(encoding="utf-8"))["gguf_file"]


def gguf_model_dir(gguf_file: str, cache_dir: Optional[str | os.PathLike] = None) -> str:
    """The cached model directory for `gguf_file`, converted on first use (safe under concurrent starts)."""
    source = Path(gguf_file).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"GGUF file {gguf_file!r} does not exist")
    stat = source.stat()
    key = hashlib.sha256(f"{LAYOUT_VERSION}:{source}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    root = Path(cache_dir or default_cache_dir()) / "gguf"
    final = root / f"{source.stem}-{key}"
    if (final / GGUF_SOURCE_FILE).is_file():
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        logger.info("converting the GGUF metadata of %s (config and tokenizer; once per file)", source)
        write_gguf_model_dir(str(source), staging)
        try:
            os.rename(staging, final)
        except OSError:  # another process finished first; its copy is identical
            if not (final / GGUF_SOURCE_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(final)


def write_gguf_model_dir(gguf_file: str, out: Path) -> None:
    """config.json, generation_config.json, the tokenizer files and gguf_source.json for `gguf_file`."""
    reader = open_gguf(gguf_file)
    config = gguf_hf_config(gguf_file, reader)
    config.save_pretrained(str(out))
    eos = config.eos_token_id
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "bos_token_id": config.bos_token_id}))
    tokenizer = gguf_tokenizer(gguf_file)
    if isinstance(eos, int):  # the GGUF's eos id (transformers <= 5.17 keep the converter's default eos token)
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    tokenizer.save_pretrained(str(out))
    write_tensor_index(reader, out / TENSOR_INDEX_FILE)
    (out / GGUF_SOURCE_FILE).write_text(json.dumps({"gguf_file": gguf_file}))


def gguf_hf_config(gguf_file: str, reader=None):
    """The transformers config transformers itself builds from the GGUF metadata, plus `architectures`,
    the head size GGUF states (attention.key_length), which transformers' mapping drops for Qwen3, and
    the rope scaling (metadata and rope_freqs factors), which transformers' GGUF code ignores."""
    from transformers import AutoConfig

    path = Path(gguf_file)
    reader = reader or open_gguf(gguf_file)
    fields = reader.fields
    arch = fields["general.architecture"].contents() if "general.architecture" in fields else None
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"GGUF architecture {arch!r} is not supported; supported: {', '.join(GGUF_ARCHITECTURES)}")
    try:
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, KeyError, OSError) as exc:
        raise ValueError(f"cannot read the GGUF metadata of {gguf_file!r}: {exc}") from exc
    config.architectures = [GGUF_ARCHITECTURES.get(config.model_type, GGUF_ARCHITECTURES[arch])]
    key_length = fields.get(f"{arch}.attention.key_length")
    if key_length is not None:
        config.head_dim = int(key_length.contents())
    scaling = gguf_rope_scaling(gguf_file, fields, arch)
    if scaling is not None and hasattr(config, "rope_parameters"):  # transformers 5
        config.rope_parameters = {**(config.rope_parameters or {}), **scaling}
    elif scaling is not None:
        config.rope_scaling = scaling
    factors = rope_freq_factors(gguf_file, reader, config)
    if factors is not None:
        setattr(config, ROPE_FREQ_FACTORS_KEY, factors)
    return config


# {arch}.rope.scaling.* keys llama.cpp writes that have no exact HF counterpart here: a file stating one is refused
UNMAPPED_ROPE_KEYS = ("attn_factor", "yarn_attn_factor", "yarn_ext_factor", "yarn_log_multiplier", "alpha")


def gguf_rope_scaling(gguf_file: str, fields, arch: str) -> Optional[dict]:
    """The HF rope parameters for the rope scaling a GGUF's metadata states, or None when it states none.

    llama.cpp's converter writes an HF rope_scaling of type linear or yarn as {arch}.rope.scaling.type,
    .factor and .original_context_length (older files: {arch}.rope.scale_linear), which transformers' GGUF
    config code does not read: without this a file converted from a long-context checkpoint would be
    served with plain rope. Any other scaling type, or a key with no exact HF counterpart, is refused.
    """

    def value(name: str):
        field = fields.get(f"{arch}.rope.{name}")
        return None if field is None else field.contents()

    kind, factor = value("scaling.type"), value("scaling.factor")
    if kind is None and value("scale_linear") is not None:
        kind, factor = "linear", value("scale_linear")
    if kind in (None, "none"):
        return None
    unmapped = [f"{arch}.rope.scaling.{key}" for key in UNMAPPED_ROPE_KEYS if value(f"scaling.{key}") is not None]
    if kind not in ("linear", "yarn") or unmapped or factor is None:
        what = f"rope scaling type {kind!r}" if kind not in ("linear", "yarn") else ", ".join(unmapped) or "no factor"
        raise ValueError(f"{gguf_file!r} states {what} in its metadata, which GGUF loading does not support")
    params = {"rope_type": kind, "factor": float(factor)}
    if kind == "yarn":
        original = value("scaling.original_context_length")
        if original is None:
            raise ValueError(f"{gguf_file!r}: yarn rope scaling without {arch}.rope.scaling.original_context_length")
        params["original_max_position_embeddings"] = int(original)
        for key in ("beta_fast", "beta_slow"):
            if value(f"scaling.yarn_{key}") is not None:
                params[key] = float(value(f"scaling.yarn_{key}"))
    return params


def rope_freq_factors(gguf_file: str, reader, config) -> Optional[list[float]]:
    """The GGUF's rope_freqs tensor (one factor per rotary frequency), or None when it has none.

    llama.cpp's converter writes these factors for a Llama-3.1/3.2 checkpoint whose HF config has a
    llama3 rope_scaling, and llama.cpp divides each frequency by its factor. They are carried verbatim
    into config.json, and the rotary embedding serves inv_freq / factor, rather than recovering the HF
    llama3 parameters from them, because:
    - the factors are what the file means: llama.cpp runs them, whatever wrote them (llama3 or not, any
      converter version, hand-edited), so dividing by them is exact for every file;
    - recovery is not well posed: the four llama3 parameters (factor, low/high_freq_factor,
      original_max_position_embeddings) are determined by the factors only up to the band edges, so a
      match would rest on guessing Llama-3.1's values, and a bit-exact check would fail on converters that
      round differently (llama.cpp's factor 1 / ((1 - s) / f + s) and HF's (1 - s) inv / f + s inv differ
      in the last bit), turning a last-ulp difference into a refusal.
    The served frequencies then equal HF's llama3 frequencies to float32 rounding (tests/test_gguf_rope.py).
    """
    tensor = next((t for t in reader.tensors if t.name == ROPE_FREQS_TENSOR), None)
    if tensor is None:
        return None
    from gguf import GGMLQuantizationType, quants

    factors = quants.dequantize(tensor.data, GGMLQuantizationType(int(tensor.tensor_type))).reshape(-1)
    expected = head_dim_of(config) // 2
    if len(factors) != expected or not (np.isfinite(factors) & (factors > 0)).all():
        raise ValueError(
            f"{gguf_file!r}: rope_freqs must hold {expected} finite positive factors (one per rotary frequency), "
            f"got {len(factors)} values: {factors.tolist()[:8]}"
        )
    return [float(f) for f in factors.astype(np.float32)]  # float32 values, exact in JSON's float64


def gguf_tokenizer(gguf_file: str):
    """The fast tokenizer transformers converts from the GGUF vocabulary, merges, special ids and template."""
    from transformers import AutoTokenizer

    path = Path(gguf_file)
    try:
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, KeyError, OSError) as exc:
        raise ValueError(f"cannot build a tokenizer from the GGUF metadata of {gguf_file!r}: {exc}") from exc
