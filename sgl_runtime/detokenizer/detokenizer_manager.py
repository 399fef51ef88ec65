"""Child process turning token ids into text: BatchTokenIDOut in, BatchStrOut out.

One IncrementalDetokenizer per request (never splits a UTF-8 character); stop strings are
trimmed from the text, and while a request streams, a tail that could still become a stop
string is held back. Logprob entries get their token's text. Other messages (FlushCacheOut,
GetStatsOut) are forwarded to the TokenizerManager unchanged.
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Optional

import zmq

from sgl_runtime.io_struct import BatchStrOut, BatchTokenIDOut, ReqStrOutput, ReqTokenOutput
from sgl_runtime.process.ipc import IpcAddresses, make_socket, report_fatal, setup_child_process
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

IDLE_POLL_MS = 1000


def run_detokenizer_process(server_args: ServerArgs, addresses: IpcAddresses, conn: Connection) -> None:
    """Process target: load the tokenizer, report readiness, convert outputs until stopped."""
    lifetime = setup_child_process("detokenizer", server_args.log_level)
    try:
        from sgl_runtime.tokenizer_utils import load_tokenizer

        manager = DetokenizerManager(load_tokenizer(server_args.tokenizer_path or server_args.model_path))
        context = zmq.Context(1)
        inbox = make_socket(context, zmq.PULL, addresses.scheduler_to_detokenizer, bind=True)
        outbox = make_socket(context, zmq.PUSH, addresses.detokenizer_to_tokenizer, bind=False)
    except Exception:
        report_fatal(conn, "detokenizer failed to start")
        sys.exit(1)
    conn.send({"status": "ready"})
    try:
        while lifetime.keep_running():
            if not inbox.poll(IDLE_POLL_MS):
                continue
            message = inbox.recv_pyobj()
            outbox.send_pyobj(manager.process(message) if isinstance(message, BatchTokenIDOut) else message)
    except Exception:
        report_fatal(conn, "detokenizer crashed")
        lifetime.exit(1)
    lifetime.exit(0)


@dataclass
class _ReqDecodeState:
    detokenizer: Any
    held_text: str = ""  # text withheld because it may be the start of a stop string


class DetokenizerManager:
    """Per-request incremental detokenization with stop-string trimming."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.states: dict[str, _ReqDecodeState] = {}

    def process(self, batch: BatchTokenIDOut) -> BatchStrOut:
        return BatchStrOut(outputs=[self._process_safely(out) for out in batch.outputs])

    def _process_safely(self, out: ReqTokenOutput) -> ReqStrOutput:
        """One request's output; if it raises, that request fails with the error and the others go on
        (the scheduler is told nothing: the TokenizerManager aborts a request that reports an error)."""
        try:
            return self._process_one(out)
        except Exception as exc:  # noqa: BLE001 - the front half validates; this is a bug, not bad input
            logger.exception("rid=%s: cannot detokenize the output; failing the request", out.rid)
            self.states.pop(out.rid, None)
            message = f"internal error while detokenizing: {type(exc).__name__}: {exc}"
            return ReqStrOutput(
                rid=out.rid,
                text_delta="",
                new_output_ids=[],
                finished_reason={"type": "abort", "message": message},
                meta_info={"error": message},
            )

    def _process_one(self, out: ReqTokenOutput) -> ReqStrOutput:
        state = self.states.get(out.rid)
        if state is None:
            state = self.states[out.rid] = _ReqDecodeState(detokenizer=self._new_detokenizer(out))
        text = state.detokenizer.add(list(out.new_output_ids))
        if out.finished_reason is not None:
            text += state.detokenizer.flush()
            del self.states[out.rid]
        text = self._trim_stop(state, text, out)
        return ReqStrOutput(
            rid=out.rid,
            text_delta=text,
            new_output_ids=list(out.new_output_ids),
            finished_reason=out.finished_reason,
            meta_info=self._meta_info(out),
        )

    def _new_detokenizer(self, out: ReqTokenOutput):
        from sgl_runtime.detokenizer.incremental_detokenizer import IncrementalDetokenizer

        return IncrementalDetokenizer(
            self.tokenizer,
            prompt_ids=list(out.prompt_tail_ids),
            skip_special_tokens=out.skip_special_tokens,
            spaces_between_special_tokens=out.spaces_between_special_tokens,
        )

    @staticmethod
    def _trim_stop(state: _ReqDecodeState, text: str, out: ReqTokenOutput) -> str:
        pending = state.held_text + text
        state.held_text = ""
        if out.no_stop_trim:
            return pending
        if out.finished_reason is not None:
            matched = out.finished_reason.get("matched")
            if out.finished_reason.get("type") == "stop" and matched in out.stop_regexes:
                found = re.search(matched, pending)
                if found:
                    pending = pending[: found.start()]
            elif out.finished_reason.get("type") == "stop" and isinstance(matched, str) and matched:
                cut = pending.find(matched)
                if cut >= 0:
                    pending = pending[:cut]
            return pending
        keep = partial_stop_suffix_len(pending, out.stop_strs)
        if keep:
            state.held_text = pending[-keep:]
            pending = pending[:-keep]
        return pending

    def _meta_info(self, out: ReqTokenOutput) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "cached_tokens": out.cached_tokens,
            "forward_passes": out.forward_passes,
        }
        if out.error is not None:
            meta["error"] = out.error
        if out.queue_time is not None:
            meta["queue_time"] = out.queue_time
        if out.input_token_logprobs is not None:
            meta["input_token_logprobs"] = self._token_entries(out.input_token_logprobs)
        if out.input_top_logprobs is not None:
            meta["input_top_logprobs"] = self._top_entries(out.input_top_logprobs)
        if out.new_output_token_logprobs is not None:
            meta["output_token_logprobs"] = self._token_entries(out.new_output_token_logprobs)
        if out.new_output_top_logprobs is not None:
            meta["output_top_logprobs"] = self._top_entries(out.new_output_top_logprobs)
        if out.input_token_ids_logprobs is not None:
            meta["input_token_ids_logprobs"] = self._top_entries(out.input_token_ids_logprobs)
        if out.new_output_token_ids_logprobs is not None:
            meta["output_token_ids_logprobs"] = self._top_entries(out.new_output_token_ids_logprobs)
        return meta

    def _token_entries(self, entries: list) -> list[list]:
        """(logprob, token_id) -> [logprob, token_id, text]."""
        texts = self._token_texts([tid for _, tid in entries])
        return [[_as_float(lp), int(tid), text] for (lp, tid), text in zip(entries, texts)]

    def _top_entries(self, positions: list) -> list[Optional[list]]:
        return [None if entries is None else self._token_entries(entries) for entries in positions]

    def _token_texts(self, token_ids: list[int]) -> list[str]:
        return self.tokenizer.batch_decode([[int(t)] for t in token_ids]) if token_ids else []


def partial_stop_suffix_len(text: str, stop_strs: tuple) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some stop string."""
    best = 0
    for stop in stop_strs:
        for length in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:length]):
                best = length
                break
    return best


def _as_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)
