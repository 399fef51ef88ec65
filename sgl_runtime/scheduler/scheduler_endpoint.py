"""The scheduler's end of the pipeline, whatever carries the messages (zmq in the server's
scheduler process, plain calls in the offline Engine).

Incoming messages go to the Scheduler (stats requests are answered here); outgoing token
outputs carry what the detokenizer needs to know of their request (stop strings, prompt tail),
since the detokenizer never sees the request itself.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from sgl_runtime.io_struct import (
    BatchTokenIDOut,
    FlushCacheReq,
    GetStatsOut,
    GetStatsReq,
    TokenizedGenerateReqInput,
)
from sgl_runtime.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

PROMPT_TAIL_TOKENS = 5  # decoding context for the first output token
WARMUP_RID = "__warmup__"
WARMUP_MAX_STEPS = 64


class SchedulerEndpoint:
    """`receive(message) -> reply or None`, `step() -> BatchTokenIDOut or None`."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.detok_info: dict[str, tuple] = {}  # rid -> (stop strings, prompt tail)

    def receive(self, message: object) -> Optional[object]:
        if isinstance(message, GetStatsReq):
            return GetStatsOut(stats=self.stats())
        if isinstance(message, TokenizedGenerateReqInput):
            tail = tuple(message.input_ids[-PROMPT_TAIL_TOKENS:])
            self.detok_info[message.rid] = (tuple(message.sampling_params.stop), tail)
        return self.scheduler.handle(message)

    def step(self) -> Optional[BatchTokenIDOut]:
        """One scheduler step; its outputs (if any) tagged for the detokenizer."""
        output = self.scheduler.step()
        if output is None or not output.outputs:
            return None
        for out in output.outputs:
            info = self.detok_info.pop(out.rid, None) if out.finished_reason else self.detok_info.get(out.rid)
            if info is not None:
                out.stop_strs = out.stop_strs or info[0]
                out.prompt_tail_ids = out.prompt_tail_ids or info[1]
        return output

    def stats(self) -> dict[str, Any]:
        stats = dict(self.scheduler.get_stats())
        stats["max_total_num_tokens"] = self.scheduler.max_total_num_tokens
        stats["kv_pool_free_tokens"] = self.scheduler.kv_available_size()  # excludes the radix cache's slots
        return stats

    def warm_up(self) -> None:
        """Run one short request through the whole model path, then drop it from the cache."""
        scheduler = self.scheduler
        request = TokenizedGenerateReqInput(
            rid=WARMUP_RID,
            input_text=None,
            input_ids=[1, 2, 3, 4],
            sampling_params=SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True),
        )
        scheduler.handle(request)
        for _ in range(WARMUP_MAX_STEPS):
            output = scheduler.step()
            if output is not None and any(o.rid == WARMUP_RID and o.finished_reason for o in output.outputs):
                break
        else:
            raise RuntimeError(f"warm-up request did not finish within {WARMUP_MAX_STEPS} steps")
        while scheduler.has_work():  # nothing else can be queued yet; be safe anyway
            scheduler.step()
        scheduler.handle(FlushCacheReq())
        logger.info("warm-up done: %s", self.stats())
