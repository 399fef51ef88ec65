"""Incremental detokenization of one output stream that never splits a UTF-8 character."""

from __future__ import annotations

from typing import Iterable, Optional

# How many prompt tokens to keep as decoding context, so the first output token decodes
# the same way it would inside the full sequence (leading spaces of SentencePiece tokens).
_PROMPT_CONTEXT_TOKENS = 5
_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turns token ids into text piece by piece.

    Keeps a small window of already decoded tokens (``prefix_offset`` .. ``read_offset``) and
    decodes ``window + new tokens``; the new text is the difference. Text ending in U+FFFD
    (an incomplete UTF-8 sequence) is held back until the next token completes it.
    """

    def __init__(
        self,
        tokenizer,
        prompt_ids: Optional[list[int]] = None,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        context = list(prompt_ids[-_PROMPT_CONTEXT_TOKENS:]) if prompt_ids else []
        self._ids: list[int] = context
        self._prefix_offset = 0
        self._read_offset = len(context)
        self.text = ""

    def add(self, token_ids: Iterable[int]) -> str:
        """Append tokens; return the newly completed text (possibly empty)."""
        self._ids.extend(int(t) for t in token_ids)
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        if len(full_text) <= len(prefix_text) or full_text.endswith(_REPLACEMENT_CHAR):
            return ""
        new_text = full_text[len(prefix_text) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        self.text += new_text
        return new_text

    def flush(self) -> str:
        """Emit whatever is held back (an incomplete character becomes U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        new_text = full_text[len(prefix_text) :] if len(full_text) > len(prefix_text) else ""
        self._prefix_offset = self._read_offset = len(self._ids)
        self.text += new_text
        return new_text

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self.tokenizer.decode(
            ids,
            skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
        )


def trim_stop_string(text: str, finished_reason: Optional[dict], no_stop_trim: bool = False) -> str:
    """Cut `text` at the stop string that finished it (SGLang drops the stop string itself)."""
    if no_stop_trim or not finished_reason or finished_reason.get("type") != "stop":
        return text
    matched = finished_reason.get("matched")
    if not isinstance(matched, str):
        return text
    pos = text.find(matched)
    return text[:pos] if pos >= 0 else text
