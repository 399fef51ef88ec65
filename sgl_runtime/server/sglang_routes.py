"""The routes an SGLang deployment calls besides generation, in SGLang 0.5.23's shapes:
/get_load and /v1/loads (what SGLang Model Gateway's load-aware policies read), /tokenize and
/detokenize (also under /v1)."""

from __future__ import annotations

import datetime
from typing import Any, Optional, Union

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.version import __version__


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Optional[str] = None
    prompt: Optional[Union[str, list[str]]] = None
    messages: Optional[list[dict]] = None
    add_special_tokens: bool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Optional[str] = None
    tokens: Union[list[int], list[list[int]]] = Field(min_length=1)
    skip_special_tokens: bool = True


def build_sglang_router(tm) -> APIRouter:
    """`tm` is the TokenizerManager (tokenizer, chat template, scheduler stats)."""
    router = APIRouter()
    context_length = tm.model_info.context_length

    @router.get("/get_load")
    async def get_load() -> list[dict[str, Any]]:
        return [_load(await tm.get_stats())]

    @router.get("/v1/loads")
    async def get_loads() -> dict[str, Any]:
        return {
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": __version__,
            "accelerator": None,
            "num_accelerators": 1,
            "loads": [_load(await tm.get_stats())],
        }

    @router.post("/tokenize")
    @router.post("/v1/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        if (body.prompt is None) == (body.messages is None):
            raise InvalidRequestError("give exactly one of prompt or messages")
        if body.messages is not None:
            tokens: Any = tm.apply_chat_template(body.messages)
            return {"tokens": tokens, "count": len(tokens), "max_model_len": context_length}
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        encoded = [tm.tokenizer.encode(p, add_special_tokens=body.add_special_tokens) for p in prompts]
        if isinstance(body.prompt, str):
            return {"tokens": encoded[0], "count": len(encoded[0]), "max_model_len": context_length}
        return {"tokens": encoded, "count": [len(t) for t in encoded], "max_model_len": context_length}

    @router.post("/detokenize")
    @router.post("/v1/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        batch = isinstance(body.tokens[0], list)
        sequences = body.tokens if batch else [body.tokens]
        vocab = tm.model_info.vocab_size
        for ids in sequences:
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise InvalidRequestError(f"tokens: token id {bad[0]} is outside the vocabulary [0, {vocab})")
        texts = [tm.tokenizer.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in sequences]
        return {"text": texts if batch else texts[0]}

    return router


def _load(stats: dict[str, Any]) -> dict[str, Any]:
    """One data-parallel rank's load, as SGLang reports it (the gateway reads num_tokens)."""
    used = int(round(stats.get("token_usage", 0.0) * stats.get("max_total_num_tokens", 0)))
    return {
        "dp_rank": 0,
        "num_reqs": stats.get("num_running_reqs", 0) + stats.get("num_waiting_reqs", 0),
        "num_running_reqs": stats.get("num_running_reqs", 0),
        "num_waiting_reqs": stats.get("num_waiting_reqs", 0),
        "num_tokens": used,
        "token_usage": stats.get("token_usage", 0.0),
    }


class IncrementalLogprobs:
    """Turns the cumulative chunks of a native /generate stream into SGLang's streamed shape: each
    chunk's meta_info carries only the output logprobs new since the previous chunk of its index
    (output_token_logprobs_length stays cumulative), which is how SGLang's frontend merges them."""

    KEYS = ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs")

    def __init__(self) -> None:
        self.sent: dict[int, int] = {}

    def __call__(self, chunk: dict) -> dict:
        meta = chunk.get("meta_info")
        if not isinstance(meta, dict) or "output_token_logprobs" not in meta:
            return chunk
        index = chunk.get("index", 0)
        start = self.sent.get(index, 0)
        self.sent[index] = len(meta["output_token_logprobs"])
        meta = {**meta, **{k: meta[k][start:] for k in self.KEYS if isinstance(meta.get(k), list)}}
        return {**chunk, "meta_info": meta}
