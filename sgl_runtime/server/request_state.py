"""What the TokenizerManager knows about one in-flight request, and the response built from it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from sgl_runtime.io_struct import ReqStrOutput, TokenizedGenerateReqInput

LOGPROB_KEYS = ("input_token_logprobs", "input_top_logprobs", "output_token_logprobs", "output_top_logprobs")
TOKEN_IDS_KEYS = ("input_token_ids_logprobs", "output_token_ids_logprobs")  # only when token_ids_logprob is set
APPENDED_KEYS = ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs")


@dataclass
class ReqState:
    """Accumulates a request's streamed outputs; `updates` is shared by the requests of one call."""

    request: TokenizedGenerateReqInput
    updates: asyncio.Queue
    index: int = 0
    return_text_in_logprobs: bool = False
    created: float = field(default_factory=time.perf_counter)
    text: str = ""
    output_ids: list = field(default_factory=list)
    counts: dict = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "forward_passes": 0}
    )
    logprobs: dict = field(default_factory=dict)
    finished_reason: Optional[dict] = None
    error: Optional[str] = None
    error_code: int = 400  # HTTP status of the error: 400 bad request, 408 timed out, 503 server stopping
    first_output_time: Optional[float] = None
    last_output_time: Optional[float] = None
    queue_time: Optional[float] = None  # reported by the scheduler with the first output
    inter_token_latency: Optional[float] = None  # of the latest update's tokens (None until the second update)
    version: int = 0  # bumped on every update, so a consumer can skip stale queue entries

    @property
    def rid(self) -> str:
        return self.request.rid

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def apply(self, out: ReqStrOutput) -> None:
        """Merge one detokenizer output into the accumulated state and signal the consumer."""
        if out.new_output_ids:
            now = time.perf_counter()
            if self.first_output_time is None:
                self.first_output_time = now
            elif self.last_output_time is not None:
                self.inter_token_latency = (now - self.last_output_time) / len(out.new_output_ids)
            self.last_output_time = now
        self.text += out.text_delta
        self.output_ids.extend(out.new_output_ids)
        meta = out.meta_info
        for key in self.counts:
            if key in meta:
                self.counts[key] = meta[key]
        for key in LOGPROB_KEYS + TOKEN_IDS_KEYS:
            if key in meta:
                if key in APPENDED_KEYS:
                    self.logprobs.setdefault(key, []).extend(meta[key])
                else:
                    self.logprobs[key] = meta[key]
        if meta.get("queue_time") is not None and self.queue_time is None:
            self.queue_time = meta["queue_time"]
        if meta.get("error"):
            self.error = meta["error"]
        if out.finished_reason is not None:
            self.finished_reason = dict(out.finished_reason)
        self.version += 1
        self.updates.put_nowait(self)

    def fail(self, message: str, code: int = 500) -> None:
        """End the request with an error (its client gets it)."""
        self.error = message
        self.error_code = code
        self.finished_reason = {"type": "abort", "message": message}
        self.version += 1
        self.updates.put_nowait(self)

    def e2e_latency(self) -> float:
        return time.perf_counter() - self.created

    def response(self) -> dict[str, Any]:
        """The native /generate answer: cumulative text, output ids and meta_info."""
        meta: dict[str, Any] = {
            "id": self.rid,
            **self.counts,
            "finish_reason": self.finished_reason,
            "e2e_latency": round(self.e2e_latency(), 6),
        }
        if self.request.return_logprob:
            for key in LOGPROB_KEYS:
                meta[key] = self._logprobs_for_client(key)
            meta["output_token_logprobs_length"] = len(meta["output_token_logprobs"])
            if self.request.token_ids_logprob is not None:
                for key in TOKEN_IDS_KEYS:
                    meta[key] = self._logprobs_for_client(key)
        return {"text": self.text, "output_ids": list(self.output_ids), "meta_info": meta}

    def _logprobs_for_client(self, key: str) -> list:
        entries = self.logprobs.get(key, [])
        if self.return_text_in_logprobs:
            return entries
        if key.endswith(("top_logprobs", "token_ids_logprobs")):
            return [None if pos is None else [[lp, tid, None] for lp, tid, _ in pos] for pos in entries]
        return [[lp, tid, None] for lp, tid, _ in entries]
