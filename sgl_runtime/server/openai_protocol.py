"""Request bodies of the OpenAI-compatible API (pydantic), and OpenAI's error shape.

Unknown fields are rejected (400 naming them). Besides OpenAI's own fields, requests accept
SGLang's extensions: top_k, min_p, repetition_penalty, min_tokens, ignore_eos, stop_token_ids,
skip_special_tokens, no_stop_trim, and the constraints regex, json_schema, ebnf/grammar, choices.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from sgl_runtime.server.sse import SafeJSONResponse


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StreamOptions(_Strict):
    include_usage: bool = False


class JsonSchemaFormat(_Strict):
    name: Optional[str] = None
    description: Optional[str] = None
    schema_: Optional[Union[dict, bool]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None
    json_schema_options: Optional[dict] = None  # extension: sgl_runtime/json_schema_options.py


class _SamplingFields(_Strict):
    """Fields shared by completions and chat completions; defined once."""

    model: Optional[str] = None
    n: int = Field(default=1, ge=1, le=128)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    stop: Optional[Union[str, list[str]]] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    seed: Optional[int] = None
    user: Optional[str] = None
    logit_bias: Optional[dict[str, float]] = None
    response_format: Optional[ResponseFormat] = None
    # SGLang extensions
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    min_tokens: Optional[int] = None
    ignore_eos: Optional[bool] = None
    stop_token_ids: Optional[list[int]] = None
    stop_regex: Optional[Union[str, list[str]]] = None
    skip_special_tokens: Optional[bool] = None
    no_stop_trim: Optional[bool] = None
    regex: Optional[str] = None
    json_schema: Optional[Union[dict, bool, str]] = None
    json_schema_options: Optional[dict] = None
    ebnf: Optional[str] = None
    grammar: Optional[str] = None
    grammar_syntax: Optional[str] = None  # "gbnf" | "lark" (None: detected)
    choices: Optional[list[str]] = None
    timeout: Optional[float] = None  # seconds; past it the request is aborted (default --request-timeout)


class CompletionRequest(_SamplingFields):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    max_tokens: Optional[int] = Field(default=16, ge=0)
    logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    echo: bool = False
    best_of: Optional[int] = None
    suffix: Optional[str] = None


class TextContentPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: Union[str, dict] = "{}"


class ToolCall(_Strict):
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: FunctionCall
    index: Optional[int] = None


class FunctionDefinition(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: Optional[str] = None
    parameters: Optional[Union[dict, bool]] = None
    strict: Optional[bool] = None


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Optional[Union[str, list[TextContentPart]]] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(default=None, ge=0)
    max_completion_tokens: Optional[int] = Field(default=None, ge=0)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    # tools and reasoning (see docs/tools.md)
    tools: Optional[list[Tool]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: Optional[dict[str, Any]] = None
    separate_reasoning: bool = True
    stream_reasoning: bool = True


def error_response(
    status_code: int,
    message: str,
    err_type: str = "invalid_request_error",
    param: Optional[str] = None,
    code: Any = None,
) -> SafeJSONResponse:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    body = {
        "error": {
            "message": message,
            "type": err_type,
            "param": param,
            "code": code if code is not None else status_code,
        }
    }
    return SafeJSONResponse(body, status_code=status_code)


def describe_validation_errors(errors: list[dict]) -> tuple[str, Optional[str]]:
    """A readable message (and the first offending field) from pydantic/FastAPI validation errors."""
    parts, first = [], None
    for err in errors:
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body",)]
        field = ".".join(loc) or "body"
        first = first or field
        parts.append(f"{field}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request", first
