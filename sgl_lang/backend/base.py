"""The interface every backend implements; the interpreter talks to backends only through it."""

from __future__ import annotations

from typing import Any, Iterator, Optional, Protocol

from sgl_lang.chat_template import PLAIN_TEMPLATE, ChatTemplate
from sgl_lang.choices import ChoicesDecision, ChoicesSamplingMethod
from sgl_lang.sampling_params import SglSamplingParams


class StreamExecutor(Protocol):
    """What a backend reads of the program it serves (interpreter.StreamExecutor)."""

    text_: str
    messages_: list
    cur_role: Optional[str]
    cur_role_begin_pos: int
    num_api_spec_tokens: Optional[int]


class BackendError(RuntimeError):
    """A backend call failed; the message is the server's."""

    def __init__(self, message: str, status_code: Optional[int] = None):
        super().__init__(message)
        self.status_code = status_code


class BaseBackend:
    """A language-model service the interpreter can drive. Text-in, text-out; the executor `s`
    gives the program text so far as `s.text_`."""

    def get_model_name(self) -> str:
        raise NotImplementedError

    def get_chat_template(self) -> ChatTemplate:
        return PLAIN_TEMPLATE

    def cache_prefix(self, prefix: str) -> None:
        """Ask the backend to keep `prefix` in its cache (no-op where unsupported)."""

    def commit_lazy_operations(self, s: "StreamExecutor") -> None:
        """Send the text so far so that forks share its cached prefix (no-op where unsupported)."""

    def generate(self, s: "StreamExecutor", sampling_params: SglSamplingParams) -> tuple[Any, Any]:
        """Continue `s.text_`; return (generated text, meta info), or lists of them for n > 1."""
        raise NotImplementedError

    def generate_stream(self, s: "StreamExecutor", sampling_params: SglSamplingParams) -> Iterator[tuple[str, dict]]:
        """Like `generate`, yielding (new text chunk, meta info so far)."""
        text, meta = self.generate(s, sampling_params)
        yield text, meta

    def generate_speculative(
        self, s: "StreamExecutor", sampling_params: SglSamplingParams, num_tokens: int
    ) -> Optional[tuple[str, Optional[list], bool]]:
        """Over-generate up to `num_tokens` after `s.text_`, ignoring the gen's stop: (text, token
        start offsets or None, whether the model stopped by itself). None: not supported here."""
        return None

    def select(
        self, s: "StreamExecutor", choices: list, temperature: float, choices_method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        raise NotImplementedError

    def flush_cache(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no cache to flush")

    def get_server_info(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} reports no server info")

    def shutdown(self) -> None:
        """Release resources (a launched server, sessions)."""
