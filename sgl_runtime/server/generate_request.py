"""Checks a native generate request's shape and splits a batch into single requests.

A request body may hold one prompt or a batch (`text` as a list, or `input_ids` as a list of
lists); per-request fields may then be one value for all or a list with one per prompt.
Everything here is pure: no tokenizer, no I/O. Errors raise InvalidRequestError naming the field.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from sgl_runtime.io_struct import GenerateReqInput
from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.sglang_fields import GATEWAY_ADDED, GENERATE_REQ_INPUT, UnsupportedFieldError, strip_sglang_fields

PER_REQUEST_FIELDS = ("sampling_params", "rid", "return_logprob", "logprob_start_len", "top_logprobs_num")

NULL_MEANS_DEFAULT = ("return_logprob", "logprob_start_len", "top_logprobs_num", "stream", "return_text_in_logprobs")


@dataclass
class SingleRequest:
    """One prompt of a (possibly batched) generate request, not yet tokenized."""

    text: Optional[str]
    input_ids: Optional[list[int]]
    sampling_params: dict
    rid: str
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    token_ids_logprob: Optional[list[int]] = None
    return_text_in_logprobs: bool = False
    stream: bool = False


def parse_generate_body(body: Any) -> GenerateReqInput:
    """Build a GenerateReqInput from decoded JSON. SGLang's fields that need nothing here are
    dropped (see sglang_fields); unsupported values and unknown fields raise InvalidRequestError."""
    if not isinstance(body, dict):
        raise InvalidRequestError(f"request body must be a JSON object, got {type(body).__name__}")
    known = {f.name for f in dataclasses.fields(GenerateReqInput)}
    try:
        body = strip_sglang_fields(body, GENERATE_REQ_INPUT, known, "", GATEWAY_ADDED)
    except UnsupportedFieldError as exc:
        raise InvalidRequestError(str(exc)) from exc
    # SGLang sends null for "the default" of these
    return GenerateReqInput(**{k: v for k, v in body.items() if v is not None or k not in NULL_MEANS_DEFAULT})


def split_generate_request(obj: GenerateReqInput) -> tuple[list[SingleRequest], bool]:
    """The single requests in `obj`, and whether it was a batch (so the answer is a list)."""
    _check_bool(obj.stream, "stream")
    _check_bool(obj.return_text_in_logprobs, "return_text_in_logprobs")
    prompts, is_batch = _prompts(obj)
    token_ids = _token_ids_logprob(obj.token_ids_logprob, len(prompts), is_batch)
    requests = []
    for i, (text, input_ids) in enumerate(prompts):
        values = {name: _pick(getattr(obj, name), i, len(prompts), name, is_batch) for name in PER_REQUEST_FIELDS}
        requests.append(
            SingleRequest(
                text=text,
                input_ids=input_ids,
                sampling_params=_check_sampling_params(values["sampling_params"]),
                rid=_check_rid(values["rid"]),
                return_logprob=_check_bool(values["return_logprob"], "return_logprob"),
                logprob_start_len=_check_int(values["logprob_start_len"], "logprob_start_len", minimum=-1),
                top_logprobs_num=_check_int(values["top_logprobs_num"], "top_logprobs_num", minimum=0),
                token_ids_logprob=token_ids[i],
                return_text_in_logprobs=obj.return_text_in_logprobs,
                stream=obj.stream,
            )
        )
    return requests, is_batch


def _prompts(obj: GenerateReqInput) -> tuple[list[tuple[Optional[str], Optional[list[int]]]], bool]:
    if (obj.text is None) == (obj.input_ids is None):
        raise InvalidRequestError("give exactly one of text or input_ids")
    if obj.text is not None:
        if isinstance(obj.text, str):
            return [(obj.text, None)], False
        if isinstance(obj.text, list) and obj.text and all(isinstance(t, str) for t in obj.text):
            return [(t, None) for t in obj.text], True
        raise InvalidRequestError("text must be a string or a non-empty list of strings")
    ids = obj.input_ids
    if isinstance(ids, list) and ids and all(isinstance(x, list) for x in ids):
        return [(None, _check_ids(x)) for x in ids], True
    return [(None, _check_ids(ids))], False


def _token_ids_logprob(value: Any, count: int, is_batch: bool) -> list[Optional[list[int]]]:
    """One list of ids (or None) per prompt: SGLang takes one list for all prompts, or one per prompt."""
    if not value:
        return [None] * count
    if not isinstance(value, list):
        raise InvalidRequestError(
            "token_ids_logprob must be a list of token ids (or, for a batch, one list per prompt)"
        )
    if not all(isinstance(x, list) for x in value):
        return [_check_token_ids(value)] * count
    if not is_batch:
        raise InvalidRequestError("token_ids_logprob is a list of lists but the request has a single prompt")
    if len(value) != count:
        raise InvalidRequestError(f"token_ids_logprob has {len(value)} entries but the batch has {count} prompts")
    return [_check_token_ids(x) if x else None for x in value]


def _check_token_ids(ids: list) -> list[int]:
    if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
        raise InvalidRequestError("token_ids_logprob must be a list of integer token ids (or one such list per prompt)")
    return list(ids)


def _check_ids(ids: Any) -> list[int]:
    if not isinstance(ids, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
        raise InvalidRequestError("input_ids must be a list of integers or a list of such lists")
    return ids


def _pick(value: Any, index: int, count: int, name: str, is_batch: bool) -> Any:
    if isinstance(value, list) and is_batch:
        if len(value) != count:
            raise InvalidRequestError(f"{name} has {len(value)} entries but the batch has {count} prompts")
        return value[index]
    if isinstance(value, list) and not is_batch:
        raise InvalidRequestError(f"{name} is a list but the request has a single prompt")
    if name == "rid" and value is not None and is_batch:
        raise InvalidRequestError("rid must be a list with one id per prompt for a batch")
    return value


def _check_sampling_params(value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequestError(f"sampling_params must be an object, got {type(value).__name__}")
    return dict(value)


def _check_rid(value: Any) -> str:
    if value is None:
        return uuid.uuid4().hex
    if not isinstance(value, str) or not value:
        raise InvalidRequestError("rid must be a non-empty string")
    return value


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{name} must be a boolean, got {value!r}")
    return value


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidRequestError(f"{name} must be >= {minimum}, got {value}")
    return value
