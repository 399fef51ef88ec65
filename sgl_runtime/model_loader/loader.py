"""Builds a model from a local checkpoint: the class from the registry, weights from *.safetensors (or dummy).

With tensor parallelism the built model is sharded (models/tensor_parallel.apply_tp) before any storage
is allocated, and each rank reads only its part of every checkpoint tensor (safetensors slices), so no
rank ever holds the whole model."""

from __future__ import annotations

import contextlib
import glob
import json
import os
from typing import Iterator, Optional

import torch
from torch import nn

from sgl_runtime.distributed.parallel_state import TPGroup
from sgl_runtime.model_config import load_hf_config
from sgl_runtime.model_loader.gguf_checkpoint import gguf_source_of
from sgl_runtime.model_loader.gguf_loader import TENSOR_INDEX_FILE, load_gguf_weights
from sgl_runtime.models.registry import get_model_class
from sgl_runtime.models.tensor_parallel import apply_tp

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
DUMMY_WEIGHT_RANGE = 0.02


def load_model(
    model_path: str,
    dtype: torch.dtype,
    device: str,
    load_format: str = "auto",
    seed: int = 0,
    tp: Optional[TPGroup] = None,
) -> nn.Module:
    """The model in eval mode on `device` in `dtype`; load_format "dummy" makes seeded random weights.
    With `tp`, this rank's shard of it (dummy weights are then seeded per rank)."""
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format={load_format!r} is not one of {LOAD_FORMATS}")
    hf_config = load_hf_config(model_path)
    model_class = get_model_class(getattr(hf_config, "architectures", None))
    model = build_empty_model(model_class, hf_config, dtype, device, tp)
    if load_format == "dummy":
        init_dummy_weights(model, seed, tp.rank if tp is not None else 0)
    elif load_format == "gguf" or gguf_source_of(model_path) is not None:
        if tp is not None and tp.size > 1:
            raise ValueError("GGUF checkpoints load on one GPU only (--tp-size 1); use a safetensors checkpoint for TP")
        load_gguf_checkpoint(model, model_path)
    else:
        load_safetensors_weights(model, model_path, lazy=tp is not None)
    return model.eval()


def build_empty_model(
    model_class: type[nn.Module], hf_config, dtype: torch.dtype, device: str, tp: Optional[TPGroup] = None
) -> nn.Module:
    """Construct on the meta device (no init cost, no host copy), shard it for `tp`, then allocate
    uninitialised storage on `device`."""
    with _default_dtype(dtype), torch.device("meta"):
        model = model_class(hf_config)
        if tp is not None and tp.size > 1:
            model = apply_tp(model, tp)
    model = model.to_empty(device=device)
    model.tie_weights()  # to_empty gives every module fresh parameters, which unties shared ones
    for module in model.modules():
        if hasattr(module, "reset_buffers"):
            module.reset_buffers()
    return model


@torch.no_grad()
def init_dummy_weights(model: nn.Module, seed: int, rank: int = 0) -> None:
    """Uniform(-0.02, 0.02) for matrices and biases, ones for norm weights; seeded, generated on the device.
    A tensor-parallel shard draws from a generator seeded by `seed + rank`; a replicated parameter (an MoE
    router, a row-parallel bias) from one seeded by `seed` alone, so every rank holds the same copy."""
    first = next(model.parameters())
    replicated = torch.Generator(device=first.device).manual_seed(seed)
    sharded = torch.Generator(device=first.device).manual_seed(seed + rank)
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
            continue
        module_name, _, param_name = name.rpartition(".")
        generator = sharded if _is_sharded(model.get_submodule(module_name), param_name) else replicated
        param.uniform_(-DUMMY_WEIGHT_RANGE, DUMMY_WEIGHT_RANGE, generator=generator)


def _is_sharded(module: nn.Module, param: str) -> bool:
    """Whether `module`'s parameter differs per tensor-parallel rank (a tp layer's, unless its region is whole)."""
    tp = getattr(module, "tp", None)
    if tp is None or tp.size == 1:
        return False
    source_region = getattr(module, "source_region", None)
    return source_region is None or source_region(param, None) is not None


def load_safetensors_weights(model: nn.Module, model_path: str, lazy: bool = False) -> None:
    """Every parameter from the checkpoint; `lazy` hands the model safetensors slices to read its part of."""
    files = safetensors_files(model_path)
    _check_complete(model, model.load_weights(iter_safetensors(files, lazy)), model_path)


def _check_complete(model: nn.Module, loaded: set[str], source: str) -> None:
    missing = sorted(set(dict(model.named_parameters())) - loaded)
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise ValueError(f"checkpoint {source!r} lacks weights for {len(missing)} parameters: {shown}")


def load_gguf_checkpoint(model: nn.Module, model_path: str) -> None:
    """Weights dequantized from the GGUF file a converted model directory names (model_source resolves
    a .gguf path to such a directory)."""
    gguf_file = gguf_source_of(model_path)
    if gguf_file is None:
        raise ValueError(f"load_format='gguf' but {model_path!r} was not converted from a GGUF file")
    loaded = load_gguf_weights(model, gguf_file, os.path.join(model_path, TENSOR_INDEX_FILE))
    _check_complete(model, loaded, gguf_file)


def safetensors_files(model_path: str) -> list[str]:
    """Shards named by model.safetensors.index.json, else every *.safetensors file in the directory."""
    index_file = os.path.join(model_path, "model.safetensors.index.json")
    if os.path.isfile(index_file):
        with open(index_file, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        files = [os.path.join(model_path, shard) for shard in shards]
        absent = [f for f in files if not os.path.isfile(f)]
        if absent:
            raise FileNotFoundError(f"shards listed in {index_file} are missing: {absent}")
        return files
    files = sorted(glob.glob(os.path.join(model_path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors weights in {model_path!r} (use load_format='dummy' for random weights)"
        )
    return files


def iter_safetensors(files: list[str], lazy: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor of the files; with `lazy`, (name, slice): nothing is read until
    the slice is indexed (`slice[a:b]` reads only those rows)."""
    from safetensors import safe_open

    for path in files:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, (f.get_slice(name) if lazy else f.get_tensor(name))


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
