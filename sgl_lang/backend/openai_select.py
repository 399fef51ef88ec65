"""`select` on OpenAI-compatible servers.

Completion models: every choice is scored from prompt logprobs (`echo` + `logprobs`, one batched
call; plus one for the unconditional method), then a choices method decides, as on the runtime.
Chat models: one call constrained to the choices (the SGLang `choices` extension field); a
server without it gets a free generation matched against the choices.
"""

from __future__ import annotations

from typing import Any

from sgl_lang.backend.base import BackendError
from sgl_lang.choices import ChoicesDecision, ChoicesSamplingMethod, normalized_prompt_logprob


def select_by_echo_logprobs(backend: Any, prefix: str, choices: list, method: ChoicesSamplingMethod) -> ChoicesDecision:
    inputs = [_entries_after(choice.logprobs, len(prefix)) for choice in _score(backend, [prefix + c for c in choices])]
    unconditional = None
    if method.requires_unconditional_logprobs:
        unconditional = [_entries_after(choice.logprobs, 0) for choice in _score(backend, list(choices))]
    return method(
        choices=choices,
        normalized_prompt_logprobs=[normalized_prompt_logprob(entries) for entries in inputs],
        input_token_logprobs=inputs,
        output_token_logprobs=[[] for _ in choices],
        unconditional_token_logprobs=unconditional,
    )


def select_by_constrained_choice(backend: Any, messages: list, choices: list) -> ChoicesDecision:
    request = {"messages": messages, "temperature": 0, "max_tokens": max(len(c) for c in choices) + 4}
    try:
        response = backend.call(backend.client.chat.completions, {**request, "extra_body": {"choices": choices}})
    except BackendError as e:
        if e.status_code not in (400, 422):
            raise
        response = backend.call(backend.client.chat.completions, request)
        text = response.choices[0].message.content or ""
        return ChoicesDecision(_closest(text, choices), {"method": "generation_match", "generated": text})
    text = response.choices[0].message.content or ""
    if text not in choices:
        raise BackendError(f"the server answered {text!r}, which is not one of the choices {choices}")
    return ChoicesDecision(text, {"method": "constrained_choice"})


def _score(backend: Any, prompts: list) -> list:
    request = {"prompt": prompts, "max_tokens": 0, "echo": True, "logprobs": 0, "temperature": 0}
    try:
        response = backend.call(backend.client.completions, request)
    except BackendError as e:
        raise BackendError(
            f"select on a completion model needs echo + logprobs from the server: {e}", e.status_code
        ) from e
    return sorted(response.choices, key=lambda choice: choice.index)


def _entries_after(logprobs: Any, boundary: int) -> list:
    """[logprob, None, token] for tokens that end after char `boundary` (token ids are not reported)."""
    if logprobs is None or not logprobs.tokens:
        raise BackendError("the server returned no prompt logprobs for select")
    return [
        [logprob, None, token]
        for token, logprob, offset in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.text_offset)
        if offset + len(token) > boundary
    ]


def _closest(text: str, choices: list) -> str:
    """The choice the text starts with, else the one sharing the longest prefix with it."""
    stripped = text.strip()
    for choice in sorted(choices, key=len, reverse=True):
        if stripped.startswith(choice.strip()):
            return choice
    return max(choices, key=lambda c: _common_prefix(stripped, c.strip()))


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
