"""Checks of OpenAI request bodies that pydantic cannot phrase well: content parts the server does
not support (images, audio, files), token-id prompts outside the vocabulary, a constraint given
twice (an SGLang field and response_format), and the native names of the fields the client used."""

from __future__ import annotations

from typing import Any

from sgl_runtime.sampling_params import InvalidRequestError

UNSUPPORTED_PARTS = {
    "image_url": "images",
    "image": "images",
    "input_image": "images",
    "input_audio": "audio",
    "audio": "audio",
    "file": "files",
    "video_url": "videos",
}
CONSTRAINT_FIELDS = ("regex", "json_schema", "ebnf", "grammar", "choices")


def check_content_parts(body: Any) -> None:
    """Raise a one-line error for a chat message part the server cannot read (before pydantic)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return
    for i, message in enumerate(body["messages"]):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in UNSUPPORTED_PARTS:
                raise InvalidRequestError(
                    f"messages[{i}].content[{j}]: {UNSUPPORTED_PARTS[kind]} are not supported by this server"
                )


def check_prompt_ids(prompts: list, vocab_size: int) -> None:
    """Token-id prompts must be ids of the vocabulary (checked before anything decodes them)."""
    for prompt in prompts:
        if isinstance(prompt, str):
            continue
        bad = next((t for t in prompt if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise InvalidRequestError(f"prompt: token id {bad} is outside the vocabulary [0, {vocab_size})")


def check_single_constraint(body: Any) -> None:
    """response_format and an SGLang constraint field are two constraints: refuse, do not pick one."""
    fmt = getattr(body, "response_format", None)
    given = [name for name in CONSTRAINT_FIELDS if getattr(body, name, None) is not None]
    if fmt is not None and fmt.type != "text" and given:
        raise InvalidRequestError(f"response_format: give either response_format or {given[0]}, not both")


def native_names(body: Any, chat: bool) -> dict[str, str]:
    """Native field -> the OpenAI field this client used, for error messages."""
    names = {"input_ids": "messages" if chat else "prompt", "top_logprobs_num": "top_logprobs" if chat else "logprobs"}
    if chat and getattr(body, "max_completion_tokens", None) is not None:
        names["max_new_tokens"] = "max_completion_tokens"
    return names
