"""The FastAPI app: the native SGLang-compatible API, the OpenAI-compatible routes, API-key
checks, metrics, and errors as 4xx JSON in OpenAI's shape."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any, AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from sgl_runtime.io_struct import GenerateReqInput
from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.server.auth import install_api_key_check
from sgl_runtime.server.errors import api_error, install_error_handlers
from sgl_runtime.server.generate_request import parse_generate_body
from sgl_runtime.server.json_body import json_body
from sgl_runtime.server.metrics import CONTENT_TYPE, ServerMetrics
from sgl_runtime.server.openai_api import build_openai_router
from sgl_runtime.server.openai_protocol import error_response
from sgl_runtime.server.sglang_routes import IncrementalLogprobs, build_sglang_router
from sgl_runtime.server.sse import SafeJSONResponse, sse_event, sse_stream
from sgl_runtime.server.tokenizer_manager import ClientDisconnected, TokenizerManager
from sgl_runtime.version import __version__

logger = logging.getLogger(__name__)

HEALTH_GENERATE_TIMEOUT_S = 60.0
SPECIAL_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token")


def build_app(tm: TokenizerManager, metrics: ServerMetrics, process_ids: Optional[dict[str, int]] = None) -> FastAPI:
    """The HTTP app; `process_ids` (name -> pid of each child process) is reported by /get_server_info."""
    args = tm.server_args

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await tm.start()
        yield

    app = FastAPI(title="sgl_runtime", version=__version__, lifespan=lifespan, default_response_class=SafeJSONResponse)
    install_error_handlers(app)
    _install_disconnect_handler(app)
    if args.api_key:
        install_api_key_check(app, args.api_key)
    app.include_router(build_openai_router(tm, args.model_name, tm.model_info.context_length))
    app.include_router(build_sglang_router(tm))

    @app.post("/generate")
    async def generate(request: Request):
        obj = parse_generate_body(await _json_body(request))
        return await _answer(tm, obj, request)

    @app.get("/health")
    async def health() -> Response:
        if tm.admission.draining:
            return error_response(503, "the server is shutting down", "server_error")
        not_ready = tm.not_ready_reason()
        if not_ready:  # 200 only once every process, the constraint compile workers included, can serve
            return error_response(503, f"the server is starting: {not_ready}", "server_error")
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        obj = GenerateReqInput(input_ids=[1], sampling_params={"max_new_tokens": 1, "temperature": 0.0})
        try:
            await asyncio.wait_for(_first(tm.generate(obj)), timeout=HEALTH_GENERATE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return error_response(503, "generation did not finish in time", "server_error")
        return Response(status_code=200)

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache():
        out = await tm.flush_cache()
        if not out.success:
            return error_response(
                400, out.message or "cache not flushed: requests are running", "invalid_request_error"
            )
        return PlainTextResponse(out.message or "Cache flushed.")

    @app.post("/abort_request")
    async def abort_request(request: Request):
        body = await _json_body(request)
        rid = body.get("rid") if isinstance(body, dict) else None
        if not isinstance(rid, str) or not rid:
            raise InvalidRequestError("rid: a request id string is required")
        count = tm.abort_by_client(rid)
        if count == 0:
            return error_response(404, f"no running request with rid {rid!r}", "not_found_error", "rid")
        return {"success": True, "aborted": count}

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def get_model_info() -> dict:
        return _model_info(tm)

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def get_server_info() -> dict:
        server_args = dataclasses.asdict(args)
        server_args["api_key"] = "***" if args.api_key else None
        return {
            **server_args,
            "version": __version__,
            "context_length": tm.model_info.context_length,
            "process_ids": dict(process_ids or {}),
            "scheduler_stats": await tm.get_stats(),
        }

    @app.get("/metrics")
    async def get_metrics() -> Response:
        counters = {"overload_rejected_requests": tm.admission.rejected}
        return Response(metrics.exposition(await tm.get_stats(), counters), media_type=CONTENT_TYPE)

    return app


async def _answer(tm: TokenizerManager, obj: GenerateReqInput, request: Request) -> Any:
    if not obj.stream:
        return await _first(tm.generate(obj, request))
    first, chunks = await tm.open_stream(obj)  # errors before the first output are a 400
    incremental = IncrementalLogprobs()

    async def events() -> AsyncIterator[str]:
        yield sse_event(incremental(first))
        async for chunk in chunks:
            yield sse_event(incremental(chunk))
            if "error" in chunk:
                return

    return StreamingResponse(sse_stream(events(), chunks), media_type="text/event-stream")


async def _first(results: AsyncIterator) -> Any:
    try:
        return await results.__anext__()
    finally:
        await results.aclose()


async def _json_body(request: Request) -> Any:
    return await json_body(request)


def _model_info(tm: TokenizerManager) -> dict[str, Any]:
    from sgl_runtime.tokenizer_utils import get_chat_template

    tok, args = tm.tokenizer, tm.server_args
    info: dict[str, Any] = {
        "model_path": args.model_path,
        "tokenizer_path": args.tokenizer_path or args.model_path,
        "served_model_name": args.model_name,
        "is_generation": True,
        "chat_template": get_chat_template(tok),
        "context_length": tm.model_info.context_length,
        "vocab_size": tm.model_info.vocab_size,
        "eos_token_ids": sorted(tm.model_info.eos_token_ids),
    }
    for name in SPECIAL_TOKENS:
        info[name] = getattr(tok, name, None)
        info[f"{name}_id"] = getattr(tok, f"{name}_id", None)
    info["special_tokens"] = list(getattr(tok, "all_special_tokens", []))
    return info


def _install_disconnect_handler(app: FastAPI) -> None:
    @app.exception_handler(ClientDisconnected)
    async def disconnected(request: Request, exc: ClientDisconnected):
        return api_error(request, 499, "client disconnected; request aborted")
