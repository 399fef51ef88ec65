"""API speculative execution: text a backend over-generated, consumed by later constants and gens.

With `@function(num_api_spec_tokens=N)`, a `gen` that has a stop string asks the backend for up
to N tokens without the stop. The part up to the stop becomes the variable; the rest is kept
here as the predicted continuation of the program text. Constant text that the prediction
starts with is consumed from it; a later `gen` whose stop (or token limit) falls inside what is
left is filled without a call. Any mismatch discards the prediction, and the next `gen` makes a
real call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sgl_lang.sampling_params import SglSamplingParams


@dataclass
class SpeculativeText:
    """Predicted text after the program's current end, with token start offsets when known."""

    text: str = ""
    token_offsets: Optional[list] = None  # char offset in `text` where each token starts
    ends_at_eos: bool = False  # the model stopped on its own right after `text`
    filled: list = field(default_factory=list)  # values of later gens filled without a call

    @staticmethod
    def eligible(params: SglSamplingParams) -> bool:
        """Speculation needs a stop string and no output constraint."""
        return (
            bool(params.stop)
            and params.effective_regex is None
            and params.json_schema is None
            and params.grammar is None
            and params.n in (None, 1)
        )

    def reset(self, text: str = "", token_offsets: Optional[list] = None, ends_at_eos: bool = False) -> None:
        self.text, self.token_offsets, self.ends_at_eos = text, token_offsets, ends_at_eos

    def consume_constant(self, constant: str) -> None:
        """The program appended `constant`: keep the rest of the prediction if it matches."""
        if not constant:
            return
        if self.text.startswith(constant):
            self._advance(len(constant))
        else:
            self.reset()

    def take(self, params: SglSamplingParams) -> Optional[str]:
        """The gen's value cut from the prediction, or None when the prediction cannot decide it."""
        if not self.text and not self.ends_at_eos:
            return None
        end = _first_stop(self.text, params.stop)
        cap = self._token_cap(params.max_new_tokens)
        if cap is not None and (end is None or cap < end):
            end = cap
        if end is None:
            if not self.ends_at_eos:
                self.reset()
                return None
            end = len(self.text)
        value = self.text[:end]
        self._advance(end)
        return value

    def _token_cap(self, max_tokens: Optional[int]) -> Optional[int]:
        if max_tokens is None or self.token_offsets is None or len(self.token_offsets) <= max_tokens:
            return None
        return self.token_offsets[max_tokens]

    def _advance(self, chars: int) -> None:
        self.text = self.text[chars:]
        if self.token_offsets is not None:
            self.token_offsets = [o - chars for o in self.token_offsets if o >= chars]
        if not self.text and not self.ends_at_eos:
            self.reset()


def _first_stop(text: str, stop) -> Optional[int]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    found = [text.find(s) for s in stops if s and s in text]
    return min(found) if found else None
