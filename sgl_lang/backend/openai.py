"""Backend for OpenAI-compatible servers (hosted APIs, or the runtime's /v1), via the `openai` package.

Chat models get the program's turns as messages (a gen must open an assistant turn, or use
speculative execution); completion models get the program text. Token usage and API calls are
counted on `backend.token_usage`. Failed calls raise BackendError with the server's message; the
client retries 429/5xx/connection errors with bounded exponential backoff (`max_retries`).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Union

from sgl_lang.backend.base import BackendError, BaseBackend
from sgl_lang.backend.openai_select import select_by_constrained_choice, select_by_echo_logprobs
from sgl_lang.chat_template import PLAIN_TEMPLATE, ChatTemplate, chat_template_from_jinja
from sgl_lang.choices import ChoicesDecision, ChoicesSamplingMethod
from sgl_lang.sampling_params import SglSamplingParams

# SglSamplingParams field -> OpenAI request field (standard) or SGLang extension (extra_body).
_STANDARD = {
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "temperature": "temperature",
    "top_p": "top_p",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "n": "n",
    "seed": "seed",
}
_EXTENSIONS = {
    "top_k": "top_k",
    "min_p": "min_p",
    "min_new_tokens": "min_tokens",
    "ignore_eos": "ignore_eos",
    "stop_token_ids": "stop_token_ids",
    "grammar": "ebnf",
    "grammar_syntax": "grammar_syntax",
}


@dataclass
class TokenUsage:
    """Totals over every call this backend made."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    api_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, usage: Any) -> None:
        with self.lock:
            self.api_calls += 1
            if usage is not None:
                self.prompt_tokens += usage.prompt_tokens or 0
                self.completion_tokens += usage.completion_tokens or 0

    def reset(self) -> None:
        with self.lock:
            self.prompt_tokens = self.completion_tokens = self.api_calls = 0


class OpenAI(BaseBackend):
    """`OpenAI("gpt-4o-mini")`, or `OpenAI("my-model", base_url="http://host:port/v1", is_chat_model=False)`."""

    def __init__(
        self,
        model_name: str,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        is_chat_model: Optional[bool] = None,
        chat_template: Any = None,
        max_retries: int = 3,
        timeout: float = 120.0,
        **client_kwargs: Any,
    ):
        openai = _import_openai()
        self._openai = openai
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout, **client_kwargs
        )
        self.model_name = model_name
        self.is_chat_model = _looks_like_chat_model(model_name) if is_chat_model is None else is_chat_model
        if isinstance(chat_template, ChatTemplate):
            self.chat_template = chat_template
        else:
            self.chat_template = chat_template_from_jinja(chat_template) if chat_template else PLAIN_TEMPLATE
        self.token_usage = TokenUsage()

    def get_model_name(self) -> str:
        return self.model_name

    def get_chat_template(self) -> ChatTemplate:
        return self.chat_template

    # Generation
    def generate(self, s, sampling_params: SglSamplingParams) -> tuple[Union[str, list[str]], dict]:
        """The completion, or with n > 1 the list of the n completions (as SGLang's OpenAI backend)."""
        response = self._create(s, self._request_kwargs(sampling_params), continue_partial=bool(s.num_api_spec_tokens))
        texts = [_choice_text(choice) for choice in response.choices]
        return (texts if len(texts) > 1 else texts[0]), _meta(response)

    def generate_stream(self, s, sampling_params: SglSamplingParams) -> Iterator[tuple[str, dict]]:
        kwargs = {**self._request_kwargs(sampling_params), "stream": True, "stream_options": {"include_usage": True}}
        stream = self._create(s, kwargs, continue_partial=bool(s.num_api_spec_tokens), count=False)
        usage = None
        chunks = iter(stream)
        while True:
            chunk = self._guard(lambda: next(chunks, None))
            if chunk is None:
                break
            usage = chunk.usage or usage
            delta = _delta_text(chunk.choices[0]) if chunk.choices else ""
            if delta:
                yield delta, {}
        self.token_usage.add(usage)

    def generate_speculative(self, s, sampling_params: SglSamplingParams, num_tokens: int):
        """Up to `num_tokens` without the stop; for chat, the whole assistant turn, which must
        start with the turn's text so far."""
        kwargs = self._request_kwargs(sampling_params.replace(stop=None, max_new_tokens=num_tokens))
        kwargs["logprobs"] = True if self.is_chat_model else 0
        partial = _partial_turn(s) if self.is_chat_model else ""
        response = self._create(s, kwargs, whole_turn=True)
        choice = response.choices[0]
        text, offsets = _choice_text(choice), _token_offsets(choice)
        if not text.startswith(partial):
            return None
        if offsets is not None:
            offsets = [o - len(partial) for o in offsets if o >= len(partial)]
        return text[len(partial) :], offsets, choice.finish_reason == "stop"

    def select(self, s, choices: list, temperature: float, choices_method: ChoicesSamplingMethod) -> ChoicesDecision:
        if self.is_chat_model:
            return select_by_constrained_choice(self, _messages(s, False, False), choices)
        return select_by_echo_logprobs(self, s.text_, choices, choices_method)

    # Requests
    def _request_kwargs(self, params: SglSamplingParams) -> dict:
        kwargs: dict = {}
        extra: dict = {}
        for name, wire in _STANDARD.items():
            if getattr(params, name) is not None:
                kwargs[wire] = getattr(params, name)
        for name, wire in _EXTENSIONS.items():
            if getattr(params, name) is not None:
                extra[wire] = getattr(params, name)
        if params.effective_regex is not None:
            extra["regex"] = params.effective_regex
        if params.json_schema is not None:
            schema = json.loads(params.json_schema) if isinstance(params.json_schema, str) else params.json_schema
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
            if params.json_schema_options is not None:  # an extension field our server reads
                kwargs["response_format"]["json_schema_options"] = params.json_schema_options
        if params.return_logprob:
            kwargs["logprobs"] = True if self.is_chat_model else (params.top_logprobs_num or 0)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _create(self, s, kwargs: dict, continue_partial: bool = False, whole_turn: bool = False, count: bool = True):
        if self.is_chat_model:
            kwargs = {**kwargs, "messages": _messages(s, continue_partial, whole_turn)}
            endpoint = self.client.chat.completions
        else:
            kwargs = _response_format_as_extension({**kwargs, "prompt": s.text_})
            endpoint = self.client.completions
        return self.call(endpoint, kwargs, count=count)

    def call(self, endpoint: Any, kwargs: dict, count: bool = True) -> Any:
        """One API call; counts its usage and turns API errors into BackendError."""
        response = self._guard(lambda: endpoint.create(model=self.model_name, **kwargs))
        if count:
            self.token_usage.add(getattr(response, "usage", None))
        return response

    def _guard(self, action):
        openai = self._openai
        try:
            return action()
        except openai.APIStatusError as e:
            raise BackendError(
                f"HTTP {e.status_code} from {self.client.base_url}: {_error_message(e)}", e.status_code
            ) from e
        except openai.APIError as e:  # connection errors, timeouts
            raise BackendError(f"{type(e).__name__} calling {self.client.base_url}: {e}") from e


def _response_format_as_extension(kwargs: dict) -> dict:
    """The completions API has no response_format parameter; send it as an extra body field."""
    if "response_format" in kwargs:
        kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "response_format": kwargs.pop("response_format")}
    return kwargs


def _messages(s, continue_partial: bool, whole_turn: bool) -> list:
    """The completed turns; the gen must open the assistant turn (see module docstring)."""
    if s.cur_role != "assistant":
        raise ValueError(
            "a chat model generates only inside an assistant turn: wrap the gen in "
            "sgl.assistant(...), or use is_chat_model=False for a completion model"
        )
    messages = [dict(m) for m in s.messages_]
    partial = _partial_turn(s)
    if partial and not whole_turn:
        if not continue_partial:
            raise ValueError(
                "a chat model cannot continue an assistant turn that already has text "
                f"({partial[:40]!r}); put the gen first in the turn, or use "
                "@function(num_api_spec_tokens=N) to generate the whole turn at once"
            )
        messages.append({"role": "assistant", "content": partial})
    return messages


def _partial_turn(s) -> str:
    return s.text_[s.cur_role_begin_pos :] if s.cur_role == "assistant" else ""


def _choice_text(choice: Any) -> str:
    message = getattr(choice, "message", None)
    return (message.content or "") if message is not None else (choice.text or "")


def _delta_text(choice: Any) -> str:
    delta = getattr(choice, "delta", None)
    return (delta.content or "") if delta is not None else (choice.text or "")


def _token_offsets(choice: Any) -> Optional[list]:
    """Char offsets where each generated token starts, from the response's logprobs."""
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is None:
        return None
    if getattr(logprobs, "text_offset", None):
        first = logprobs.text_offset[0]
        return [o - first for o in logprobs.text_offset]
    content = getattr(logprobs, "content", None)
    if not content:
        return None
    offsets, position = [], 0
    for token in content:
        offsets.append(position)
        position += len(token.token)
    return offsets


def _meta(response: Any) -> dict:
    usage = getattr(response, "usage", None)
    return {
        "id": response.id,
        "finish_reason": response.choices[0].finish_reason,
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
    }


def _error_message(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        return str(inner.get("message", inner)) if isinstance(inner, dict) else str(inner)
    return getattr(error, "message", None) or str(error)


def _looks_like_chat_model(model_name: str) -> bool:
    name = model_name.lower()
    return not ("instruct" in name and "gpt-3.5" in name or name.startswith(("davinci", "babbage")))


def _import_openai():
    try:
        import openai
    except ImportError as e:
        raise ImportError("sgl_lang.OpenAI needs the openai package: pip install 'sgl-lang[openai]'") from e
    return openai
