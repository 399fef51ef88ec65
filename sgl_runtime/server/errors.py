"""Every error the HTTP server answers, in one shape (OpenAI's: {"error": {message, type, param,
code}}), for native routes, /v1 routes, unknown routes (404) and methods (405) alike.

On /v1 routes a message speaks OpenAI's field names: a route records the names the client used
(`request.state.openai_names`, native name -> OpenAI name) and native ones are rewritten here.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.server.json_body import BodyTooLargeError
from sgl_runtime.server.openai_protocol import describe_validation_errors, error_response
from sgl_runtime.server.overload import RequestTimeoutError, ServerBusyError

logger = logging.getLogger(__name__)

# native -> OpenAI field names on /v1 routes, unless the route recorded the client's own spelling
OPENAI_NAMES = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "input_ids": "prompt",
    "text": "prompt",
    "top_logprobs_num": "logprobs",
}
_NATIVE_FIELD = re.compile(r"\b(?:sampling_params\.)?(max_new_tokens|min_new_tokens|input_ids|top_logprobs_num)\b")
_PARAM = re.compile(r"^([A-Za-z_][\w.\[\]]*):")
HTTP_ERROR_TYPES = {
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_overloaded",
}


def openai_message(message: str, names: Optional[dict[str, str]] = None) -> str:
    """`message` with native field names (sampling_params.max_new_tokens, ...) in OpenAI's spelling."""
    mapping = {**OPENAI_NAMES, **(names or {})}
    message = _NATIVE_FIELD.sub(lambda m: mapping.get(m.group(1), m.group(1)), message)
    return message.replace("sampling_params.", "")


def api_error(
    request: Optional[Request],
    status: int,
    message: str,
    err_type: Optional[str] = None,
    code: Any = None,
    headers: Optional[dict[str, str]] = None,
):
    """The error response for `request`, translated to OpenAI's names on /v1 routes."""
    if request is not None and request.url.path.startswith("/v1"):
        message = openai_message(message, getattr(request.state, "openai_names", None))
    match = _PARAM.match(message)
    response = error_response(
        status,
        message,
        err_type or HTTP_ERROR_TYPES.get(status, "invalid_request_error"),
        param=match.group(1) if match else None,
        code=code,
    )
    response.headers.update(headers or {})
    return response


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(BodyTooLargeError)
    async def body_too_large(request: Request, exc: BodyTooLargeError):
        return api_error(request, 413, str(exc))

    @app.exception_handler(InvalidRequestError)
    async def invalid_request(request: Request, exc: InvalidRequestError):
        return api_error(request, 400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        message, _ = describe_validation_errors(list(exc.errors()))
        return api_error(request, 400, message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            detail = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}"
        return api_error(request, exc.status_code, detail, headers=dict(exc.headers or {}))

    @app.exception_handler(ServerBusyError)
    async def busy(request: Request, exc: ServerBusyError):
        return api_error(request, 503, str(exc), headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(RequestTimeoutError)
    async def timed_out(request: Request, exc: RequestTimeoutError):
        return api_error(request, 408, str(exc))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        logger.exception("error while serving %s %s", request.method, request.url.path)
        return api_error(request, 500, f"internal error: {type(exc).__name__}: {exc}", "server_error")
