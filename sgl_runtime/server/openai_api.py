"""The OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions.

Each request is mapped onto a native GenerateReqInput (always a batch of token-id prompts,
so results come back as an indexed list) and answered in OpenAI's shapes.
"""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator, Optional

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from sgl_runtime.io_struct import GenerateReqInput
from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.server.json_body import json_body
from sgl_runtime.server.openai_checks import (
    check_content_parts,
    check_prompt_ids,
    check_single_constraint,
    native_names,
)
from sgl_runtime.server.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ResponseFormat,
    _SamplingFields,
    describe_validation_errors,
)
from sgl_runtime.server.openai_responses import StreamBuilder, completion_response
from sgl_runtime.server.sse import sse_event, sse_stream
from sgl_runtime.server.tool_calls.chat import ChatStreamBuilder, chat_tool_response
from sgl_runtime.server.tool_calls.output import ChoiceParser
from sgl_runtime.server.tool_calls.plan import ChatPlan, chat_parsers
from sgl_runtime.sglang_fields import (
    CHAT_COMPLETION_REQUEST,
    COMPLETION_REQUEST,
    UnsupportedFieldError,
    strip_sglang_fields,
)

JSON_OBJECT_SCHEMA = {"type": "object"}
SGLANG_TABLES = {"CompletionRequest": COMPLETION_REQUEST, "ChatCompletionRequest": CHAT_COMPLETION_REQUEST}
# OpenAI field -> native sampling parameter (None values are left out).
RENAMED = {"min_tokens": "min_new_tokens"}
PASSED_THROUGH = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "skip_special_tokens",
    "no_stop_trim",
    "regex",
    "json_schema",
    "json_schema_options",
    "ebnf",
    "grammar",
    "grammar_syntax",
    "choices",
    "stop",
    "stop_regex",
    "logit_bias",
)


def build_openai_router(tokenizer_manager, model_name: str, context_length: int) -> APIRouter:
    router = APIRouter()
    tm = tokenizer_manager
    tool_format, reasoning_format = chat_parsers(tm.server_args, tm.tokenizer)

    @router.get("/v1/models")
    async def list_models() -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "sgl_runtime",
                    "max_model_len": context_length,
                }
            ],
        }

    @router.post("/v1/completions")
    async def completions(request: Request):
        body = await parse_body(request, CompletionRequest)
        request.state.openai_names = native_names(body, chat=False)
        _reject_unsupported(body)
        if body.suffix:
            raise InvalidRequestError("suffix is not supported")
        if body.best_of is not None and body.best_of != body.n:
            raise InvalidRequestError("best_of is not supported (it must equal n when given)")
        check_prompt_ids(body_prompt_list(body.prompt), tm.model_info.vocab_size)
        prompts = _completion_prompts(body.prompt, tm.tokenizer)
        params = sampling_params(body, body.max_tokens if body.max_tokens is not None else 16)
        echo_texts = [_prompt_text(p, tm.tokenizer) for p in body_prompt_list(body.prompt)] if body.echo else []
        obj = GenerateReqInput(
            input_ids=prompts,
            sampling_params=params,
            stream=body.stream,
            return_text_in_logprobs=True,
            return_logprob=body.logprobs is not None,
            top_logprobs_num=body.logprobs or 0,
            logprob_start_len=0 if body.echo and body.logprobs is not None else -1,
            timeout=body.timeout,
        )
        if body.stream:
            builder = StreamBuilder(
                model=model_name, chat=False, logprobs=body.logprobs is not None, echo_texts=echo_texts, n=body.n
            )
            return await _stream(tm, obj, builder, _include_usage(body))
        results = await _collect(tm, obj, request)
        return completion_response(results, model_name, body.n, echo_texts, body.logprobs is not None)

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await parse_body(request, ChatCompletionRequest)
        request.state.openai_names = native_names(body, chat=True)
        _reject_unsupported(body)
        if body.top_logprobs and not body.logprobs:
            raise InvalidRequestError("top_logprobs requires logprobs to be true")
        plan = ChatPlan.build(body, tool_format, reasoning_format)
        prompt = tm.requests.chat_prompt_text(plan.messages, plan.tools, plan.template_kwargs)
        input_ids = tm.tokenizer.encode(prompt, add_special_tokens=False)
        open_at_start = reasoning_format is not None and reasoning_format.opens_in_reasoning(prompt)
        max_new = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        params = sampling_params(body, max_new if max_new is not None else max(context_length - len(input_ids), 0))
        params = plan.constrain(params, open_at_start)
        obj = GenerateReqInput(
            input_ids=[input_ids],
            sampling_params=params,
            stream=body.stream,
            return_text_in_logprobs=True,
            return_logprob=body.logprobs,
            top_logprobs_num=body.top_logprobs or 0,
            timeout=body.timeout,
        )
        parser = ChoiceParser(plan, open_at_start)
        if body.stream:
            builder = ChatStreamBuilder(model=model_name, chat=True, logprobs=body.logprobs, n=body.n, parser=parser)
            return await _stream(tm, obj, builder, _include_usage(body))
        results = await _collect(tm, obj, request)
        return chat_tool_response(results, model_name, body.n, body.logprobs, parser)

    return router


async def parse_body(request: Request, model: type[BaseModel]) -> Any:
    """The JSON body validated into `model`, whatever the Content-Type header says. SGLang's own
    request fields that need nothing here are dropped first (see sglang_fields)."""
    body = await json_body(request)
    check_content_parts(body)
    table = SGLANG_TABLES.get(model.__name__)
    if isinstance(body, dict) and table is not None:
        try:
            body = strip_sglang_fields(body, table, set(model.model_fields), "")
        except UnsupportedFieldError as exc:
            raise InvalidRequestError(str(exc)) from exc
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        message, _ = describe_validation_errors(exc.errors(include_url=False))
        raise InvalidRequestError(message) from exc


def sampling_params(body: _SamplingFields, max_new_tokens: int) -> dict[str, Any]:
    """The native sampling_params dict for an OpenAI request body."""
    params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "n": body.n}
    for name in PASSED_THROUGH:
        value = getattr(body, name)
        if value is not None:
            params[RENAMED.get(name, name)] = value
    from_format = response_format_params(body.response_format)
    if "json_schema_options" in params and "json_schema_options" in from_format:
        raise InvalidRequestError("give json_schema_options either in response_format or beside it, not both")
    params.update(from_format)
    constraints = [k for k in ("regex", "json_schema", "ebnf", "grammar", "choices") if k in params]
    if len(constraints) > 1:
        raise InvalidRequestError(f"only one constraint may be given, got {', '.join(constraints)}")
    return params


def response_format_params(fmt: Optional[ResponseFormat]) -> dict[str, Any]:
    if fmt is None or fmt.type == "text":
        return {}
    options = {} if fmt.json_schema_options is None else {"json_schema_options": fmt.json_schema_options}
    if fmt.type == "json_object":
        return {"json_schema": json.dumps(JSON_OBJECT_SCHEMA), **options}
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise InvalidRequestError("response_format.json_schema.schema is required for type json_schema")
    return {"json_schema": json.dumps(fmt.json_schema.schema_), **options}


def body_prompt_list(prompt: Any) -> list:
    """The prompt field as a list of prompts (each a string or a list of token ids)."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(p, int) for p in prompt):
        return [prompt]
    return list(prompt)


def _completion_prompts(prompt: Any, tokenizer) -> list[list[int]]:
    prompts = body_prompt_list(prompt)
    if not prompts:
        raise InvalidRequestError("prompt: the prompt is empty")
    return [tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]


def _prompt_text(prompt: Any, tokenizer) -> str:
    return prompt if isinstance(prompt, str) else tokenizer.decode(prompt)


def _reject_unsupported(body: _SamplingFields) -> None:
    """SGLang's unsupported fields are refused while parsing (sglang_fields); a constraint given twice here."""
    check_single_constraint(body)


def _include_usage(body: _SamplingFields) -> bool:
    return bool(body.stream_options and body.stream_options.include_usage)


async def _collect(tm, obj: GenerateReqInput, request: Request) -> list[dict]:
    async for results in tm.generate(obj, request):
        return results
    raise RuntimeError("generate produced no result")


async def _stream(tm, obj: GenerateReqInput, builder: StreamBuilder, include_usage: bool) -> StreamingResponse:
    first, chunks = await tm.open_stream(obj)  # errors before the first output are a 400

    async def events() -> AsyncIterator[str]:
        async for chunk in _prepend(first, chunks):
            if "error" in chunk:
                yield sse_event(chunk)
                return
            yield sse_event(builder.chunk(chunk))
        if include_usage:
            yield sse_event(builder.usage_chunk())

    return StreamingResponse(sse_stream(events(), chunks), media_type="text/event-stream")


async def _prepend(first: Any, rest: AsyncIterator) -> AsyncIterator:
    yield first
    async for item in rest:
        yield item
