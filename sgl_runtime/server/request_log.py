"""--log-requests: one log line when a request arrives and one when it finishes, each naming its rid
(the same id the scheduler and detokenizer put in their lines about the request)."""

from __future__ import annotations

import logging

logger = logging.getLogger("sgl_runtime.requests")

MAX_LOGGED_TEXT = 200


def log_request_arrival(tokenized) -> None:
    params = tokenized.sampling_params
    text = tokenized.input_text or ""
    logger.info(
        "rid=%s arrived: %d prompt tokens, max_new_tokens=%d, temperature=%s, constraint=%s, text=%r",
        tokenized.rid,
        len(tokenized.input_ids),
        params.max_new_tokens,
        params.temperature,
        params.constraint[0] if params.constraint else None,
        text[:MAX_LOGGED_TEXT],
    )


def log_request_finish(state) -> None:
    logger.info(
        "rid=%s finished: %s, %d prompt + %d completion tokens (%d cached), e2e %.3f s%s",
        state.rid,
        (state.finished_reason or {}).get("type"),
        state.counts["prompt_tokens"],
        state.counts["completion_tokens"],
        state.counts["cached_tokens"],
        state.e2e_latency(),
        f", error: {state.error}" if state.error else "",
    )
