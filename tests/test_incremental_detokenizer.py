"""IncrementalDetokenizer reproduces the full decode piece by piece and never splits a UTF-8 character."""

from __future__ import annotations

import pytest

from sgl_runtime.detokenizer.incremental_detokenizer import IncrementalDetokenizer, trim_stop_string
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_qwen2_tokenizer()


@pytest.mark.parametrize("text", ["Hello, world! 你好，世界 🤖🎉 café", "  spaces\n\tand tabs ", "日本語のテキスト😀"])
def test_pieces_concatenate_to_the_full_text(tokenizer, text):
    ids = tokenizer.encode(text)
    detok = IncrementalDetokenizer(tokenizer, prompt_ids=tokenizer.encode("Prompt:"))
    pieces = [detok.add([t]) for t in ids]
    assert "".join(pieces) + detok.flush() == text == detok.text
    assert all("\ufffd" not in p for p in pieces)


def test_split_multibyte_character_is_held_back(tokenizer):
    emoji_bytes = "🤖".encode()
    # Byte-level tokens for each byte of the emoji: the first three alone are an incomplete character.
    byte_ids = [tokenizer.convert_tokens_to_ids(_byte_token(b)) for b in emoji_bytes]
    detok = IncrementalDetokenizer(tokenizer)
    assert [detok.add([t]) for t in byte_ids] == ["", "", "", "🤖"]


def test_special_tokens_skipped_or_kept(tokenizer):
    ids = tokenizer.encode("hi") + [151645]
    assert IncrementalDetokenizer(tokenizer).add(ids) == "hi"
    assert IncrementalDetokenizer(tokenizer, skip_special_tokens=False).add(ids) == "hi<|im_end|>"


def test_trim_stop_string():
    assert trim_stop_string("abc STOP def", {"type": "stop", "matched": "STOP"}) == "abc "
    assert trim_stop_string("abc STOP", {"type": "stop", "matched": "STOP"}, no_stop_trim=True) == "abc STOP"
    assert trim_stop_string("abc", {"type": "stop", "matched": 151645}) == "abc"
    assert trim_stop_string("abc", {"type": "length", "length": 3}) == "abc"


def _byte_token(b: int) -> str:
    """The GPT-2 byte-to-unicode alphabet used by byte-level BPE vocabularies."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    if b in printable:
        return chr(b)
    extra = [x for x in range(256) if x not in printable]
    return chr(256 + extra.index(b))
