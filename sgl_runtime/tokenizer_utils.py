"""Loads a model's tokenizer from its local directory and reads its EOS token ids (never touches the network)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def load_tokenizer(path: str, chat_template: Optional[str] = None):
    """The tokenizer stored in `path` (local files only); `chat_template` (a file or Jinja text) overrides its own."""
    from transformers import AutoTokenizer

    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"tokenizer directory {path!r} does not exist")
    if not any((directory / name).exists() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"no tokenizer files in {path!r}: expected one of {', '.join(TOKENIZER_FILES)}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load the tokenizer in {path!r}: {exc}") from exc
    if chat_template is not None:
        tokenizer.chat_template = _read_chat_template(chat_template)
    return tokenizer


def get_chat_template(tokenizer) -> Optional[str]:
    """The tokenizer's Jinja chat template, or None when it has none."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # some tokenizers keep named templates
        template = template.get("default") or next(iter(template.values()), None)
    return template


def get_eos_token_ids(model_path: str, tokenizer=None) -> set[int]:
    """EOS ids from generation_config.json and config.json, plus the tokenizer's own eos token."""
    ids = read_checkpoint_eos_ids(model_path)
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    elif tokenizer is None:
        ids |= read_tokenizer_eos_ids(model_path)
    return ids


def read_checkpoint_eos_ids(model_path: str) -> set[int]:
    """eos_token_id (int or list) from generation_config.json, else config.json."""
    for name in ("generation_config.json", "config.json"):
        data = _read_json(os.path.join(model_path, name))
        if data.get("eos_token_id") is not None:
            return set(_as_int_list(data["eos_token_id"]))
    return set()


GENERATION_DEFAULT_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def read_generation_defaults(model_path: str) -> dict:
    """The sampling defaults a checkpoint recommends (generation_config.json), for --sampling-defaults model."""
    data = _read_json(os.path.join(model_path, "generation_config.json"))
    return {
        key: data[key]
        for key in GENERATION_DEFAULT_KEYS
        if isinstance(data.get(key), (int, float)) and not isinstance(data.get(key), bool)
    }


def read_tokenizer_eos_ids(path: str) -> set[int]:
    """The tokenizer's eos token id, read from its files without building the tokenizer (cheap)."""
    config = _read_json(os.path.join(path, "tokenizer_config.json"))
    eos = config.get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    if not eos:
        return set()
    for token_id, entry in config.get("added_tokens_decoder", {}).items():
        if entry.get("content") == eos:
            return {int(token_id)}
    for entry in _read_json(os.path.join(path, "tokenizer.json")).get("added_tokens", []):
        if entry.get("content") == eos:
            return {int(entry["id"])}
    return set()


def _as_int_list(value) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def chat_template_is_path(template: str) -> bool:
    """Jinja text has a tag ({{ or {%); anything else is a file name."""
    return "{{" not in template and "{%" not in template


def _read_chat_template(template: str) -> str:
    if not chat_template_is_path(template):
        return template
    if not os.path.isfile(template):
        raise FileNotFoundError(
            f"chat template file {template!r} does not exist (give a Jinja file or the template text itself)"
        )
    with open(template, encoding="utf-8") as f:
        return f.read()
