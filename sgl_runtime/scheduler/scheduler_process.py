"""Child-process entry that runs the Scheduler between the TokenizerManager and the Detokenizer.

Loop: drain the inbox without blocking and hand each message to the Scheduler; run `step()`
while it has work; otherwise block on the inbox (with a timeout, to notice a dead parent).
Readiness (after a warm-up request has run through the model) and fatal errors are reported
to the parent over a pipe; a crash exits non-zero.
"""

from __future__ import annotations

import logging
import sys
from multiprocessing.connection import Connection
from typing import Any

import zmq

from sgl_runtime.io_struct import FlushCacheReq, GetStatsOut, GetStatsReq, TokenizedGenerateReqInput
from sgl_runtime.process.ipc import report_fatal, ChildLifetime, IpcAddresses, make_socket, setup_child_process
from sgl_runtime.sampling_params import SamplingParams
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

IDLE_POLL_MS = 1000
PROMPT_TAIL_TOKENS = 5  # decoding context for the first output token
WARMUP_RID = "__warmup__"
WARMUP_MAX_STEPS = 64


def run_scheduler_process(server_args: ServerArgs, addresses: IpcAddresses, conn: Connection) -> None:
    """Process target: build the scheduler, report readiness, serve until stopped."""
    lifetime = setup_child_process("scheduler", server_args.log_level)
    try:
        loop = SchedulerLoop(server_args, addresses, lifetime)
    except Exception:
        report_fatal(conn, "scheduler failed to start")
        sys.exit(1)
    conn.send({"status": "ready", "stats": loop.stats()})
    try:
        loop.run_forever()
    except Exception:
        report_fatal(conn, "scheduler crashed")
        lifetime.exit(1)
    lifetime.exit(0)


class SchedulerLoop:
    """Owns the Scheduler and its two sockets."""

    def __init__(self, server_args: ServerArgs, addresses: IpcAddresses, lifetime: ChildLifetime) -> None:
        from sgl_runtime.scheduler.scheduler import Scheduler

        self.lifetime = lifetime
        self.detok_info: dict[str, tuple] = {}  # rid -> (stop strings, prompt tail) for the detokenizer
        self.scheduler = Scheduler(server_args)
        self._warm_up()
        context = zmq.Context(1)
        self.inbox = make_socket(context, zmq.PULL, addresses.tokenizer_to_scheduler, bind=True)
        self.outbox = make_socket(context, zmq.PUSH, addresses.scheduler_to_detokenizer, bind=False)

    def run_forever(self) -> None:
        while self.lifetime.keep_running():
            self._process_inbox(block=not self.scheduler.has_work())
            if self.scheduler.has_work():
                output = self.scheduler.step()
                if output is not None and output.outputs:
                    self._attach_detok_info(output.outputs)
                    self.outbox.send_pyobj(output)
        logger.info("scheduler stopping (%s)", "SIGTERM" if self.lifetime.stop_requested else "parent gone")

    def stats(self) -> dict[str, Any]:
        stats = dict(self.scheduler.get_stats())
        stats["max_total_num_tokens"] = self.scheduler.max_total_num_tokens
        stats["kv_pool_free_tokens"] = self.scheduler.kv_available_size()  # excludes the radix cache's slots
        return stats

    def _process_inbox(self, block: bool) -> None:
        if block and not self.inbox.poll(IDLE_POLL_MS):
            return
        while True:
            try:
                message = self.inbox.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._dispatch(message)

    def _dispatch(self, message: object) -> None:
        if isinstance(message, GetStatsReq):
            self.outbox.send_pyobj(GetStatsOut(stats=self.stats()))
            return
        if isinstance(message, TokenizedGenerateReqInput):
            tail = tuple(message.input_ids[-PROMPT_TAIL_TOKENS:])
            self.detok_info[message.rid] = (tuple(message.sampling_params.stop), tail)
        reply = self.scheduler.handle(message)
        if reply is not None:
            self.outbox.send_pyobj(reply)

    def _attach_detok_info(self, outputs: list) -> None:
        """Tell the detokenizer each request's stop strings and prompt tail (it never sees the request)."""
        for out in outputs:
            info = self.detok_info.pop(out.rid, None) if out.finished_reason else self.detok_info.get(out.rid)
            if info is not None:
                out.stop_strs = out.stop_strs or info[0]
                out.prompt_tail_ids = out.prompt_tail_ids or info[1]

    def _warm_up(self) -> None:
        """Run one short request through the whole model path, then drop it from the cache."""
        request = TokenizedGenerateReqInput(
            rid=WARMUP_RID, input_text=None, input_ids=[1, 2, 3, 4],
            sampling_params=SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True),
        )
        self.scheduler.handle(request)
        for _ in range(WARMUP_MAX_STEPS):
            output = self.scheduler.step()
            if output is not None and any(o.rid == WARMUP_RID and o.finished_reason for o in output.outputs):
                break
        else:
            raise RuntimeError(f"warm-up request did not finish within {WARMUP_MAX_STEPS} steps")
        while self.scheduler.has_work():  # nothing else can be queued yet; be safe anyway
            self.scheduler.step()
        self.scheduler.handle(FlushCacheReq())
        logger.info("warm-up done: %s", self.stats())
