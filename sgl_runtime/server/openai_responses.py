"""Builds OpenAI response objects (completions and chat, whole and streamed) from the
TokenizerManager's native outputs: cumulative text, finish reason and [logprob, id, text] entries."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def finish_reason(result: dict) -> Optional[str]:
    reason = result["meta_info"].get("finish_reason")
    return None if reason is None else reason.get("type")


def matched_stop(result: dict) -> Any:
    reason = result["meta_info"].get("finish_reason") or {}
    return reason.get("matched")


def usage(results: list[dict], n: int) -> dict[str, int]:
    """Token counts; a prompt sampled n times is counted once, as OpenAI does."""
    prompt = sum(r["meta_info"]["prompt_tokens"] for r in results) // max(n, 1)
    completion = sum(r["meta_info"]["completion_tokens"] for r in results)
    cached = sum(r["meta_info"]["cached_tokens"] for r in results) // max(n, 1)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


# ------------------------------------------------------------------------------ logprobs
def completion_logprobs(entries: list, tops: list, text_offset: int = 0) -> dict[str, list]:
    """Legacy completions logprobs: tokens, token_logprobs, top_logprobs, text_offset."""
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for i, (logprob, _, text) in enumerate(entries):
        out["tokens"].append(text)
        out["token_logprobs"].append(logprob)
        top = tops[i] if i < len(tops) else None
        out["top_logprobs"].append(None if top is None else {t: lp for lp, _, t in top})
        out["text_offset"].append(text_offset)
        text_offset += len(text or "")
    return out


def chat_logprobs(entries: list, tops: list) -> dict[str, list]:
    """Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}."""
    content = []
    for i, (logprob, _, text) in enumerate(entries):
        top = tops[i] if i < len(tops) and tops[i] is not None else []
        content.append({**_chat_token(logprob, text), "top_logprobs": [_chat_token(lp, t) for lp, _, t in top]})
    return {"content": content}


def _chat_token(logprob: Optional[float], text: Optional[str]) -> dict[str, Any]:
    text = text or ""
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def prompt_logprobs(meta: dict) -> tuple[list, list]:
    """The prompt's logprob entries and their top-logprob lists (aligned; None where absent)."""
    entries = meta.get("input_token_logprobs") or []
    return entries, _tops(meta, "input", entries)


def _tops(meta: dict, side: str, entries: list) -> list:
    tops = meta.get(f"{side}_top_logprobs") or []
    return list(tops) + [None] * (len(entries) - len(tops))


# ------------------------------------------------------------------------------ whole responses
def completion_response(results: list[dict], model: str, n: int, echo_texts: list[str], logprobs: bool) -> dict:
    choices = []
    for index, result in enumerate(results):
        meta = result["meta_info"]
        echo = echo_texts[index // n] if echo_texts else ""
        choice: dict[str, Any] = {
            "index": index,
            "text": echo + result["text"],
            "logprobs": None,
            "finish_reason": finish_reason(result),
            "matched_stop": matched_stop(result),
        }
        if logprobs:
            in_entries, in_tops = prompt_logprobs(meta) if echo_texts else ([], [])
            choice["logprobs"] = completion_logprobs(
                in_entries + meta["output_token_logprobs"],
                in_tops + _tops(meta, "output", meta["output_token_logprobs"]),
            )
        choices.append(choice)
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(results, n),
    }


def chat_response(results: list[dict], model: str, n: int, logprobs: bool) -> dict:
    choices = []
    for index, result in enumerate(results):
        meta = result["meta_info"]
        choices.append(
            {
                "index": index,
                "message": {"role": "assistant", "content": result["text"]},
                "logprobs": chat_logprobs(meta["output_token_logprobs"], meta["output_top_logprobs"])
                if logprobs
                else None,
                "finish_reason": finish_reason(result),
                "matched_stop": matched_stop(result),
            }
        )
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(results, n),
    }


# ------------------------------------------------------------------------------ streaming
@dataclass
class StreamCursor:
    """How much of one choice's cumulative output has been sent."""

    text_len: int = 0
    logprob_len: int = 0
    started: bool = False
    text_offset: int = 0


@dataclass
class StreamBuilder:
    """Turns cumulative native chunks into OpenAI delta chunks for one request."""

    model: str
    chat: bool
    logprobs: bool
    echo_texts: list = field(default_factory=list)
    n: int = 1
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    cursors: dict = field(default_factory=dict)
    finals: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.id = new_id("chatcmpl" if self.chat else "cmpl")

    def chunk(self, result: dict) -> dict:
        index = result.get("index", 0)
        cursor = self.cursors.setdefault(index, StreamCursor())
        text = result["text"][cursor.text_len :]
        cursor.text_len = len(result["text"])
        meta = result["meta_info"]
        entries, tops = self._new_logprobs(meta, cursor)
        reason = finish_reason(result)
        if reason is not None:
            self.finals[index] = result
        choice: dict[str, Any] = {"index": index, "finish_reason": reason}
        if reason is not None:
            choice["matched_stop"] = matched_stop(result)
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if not cursor.started:
                delta["role"] = "assistant"
            choice["delta"] = delta
            choice["logprobs"] = chat_logprobs(entries, tops) if self.logprobs else None
        else:
            if not cursor.started and self.echo_texts:
                text = self.echo_texts[index // self.n] + text
            choice["text"] = text
            if self.logprobs:
                choice["logprobs"] = completion_logprobs(entries, tops, cursor.text_offset)
                cursor.text_offset += sum(len(t or "") for _, _, t in entries)
            else:
                choice["logprobs"] = None
        cursor.started = True
        return self._envelope([choice])

    def usage_chunk(self) -> dict:
        results = [self.finals[i] for i in sorted(self.finals)]
        return {**self._envelope([]), "usage": usage(results, self.n)}

    def _new_logprobs(self, meta: dict, cursor: StreamCursor) -> tuple[list, list]:
        if not self.logprobs:
            return [], []
        entries = meta.get("output_token_logprobs") or []
        tops = meta.get("output_top_logprobs") or []
        new_entries, new_tops = entries[cursor.logprob_len :], tops[cursor.logprob_len :]
        new_tops = new_tops + [None] * (len(new_entries) - len(new_tops))
        if not cursor.started and self.echo_texts:
            in_entries, in_tops = prompt_logprobs(meta)
            new_entries, new_tops = in_entries + new_entries, in_tops + new_tops
        cursor.logprob_len = len(entries)
        return new_entries, new_tops

    def _envelope(self, choices: list) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
