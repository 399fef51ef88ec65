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

from sgl_runtime.process.ipc import ChildLifetime, IpcAddresses, make_socket, report_fatal, setup_child_process
from sgl_runtime.scheduler.scheduler_endpoint import SchedulerEndpoint
from sgl_runtime.scheduler.watchdog import Watchdog
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

IDLE_POLL_MS = 1000


def run_scheduler_process(server_args: ServerArgs, addresses: IpcAddresses, conn: Connection) -> None:
    """Process target: build the scheduler, report readiness, serve until stopped."""
    lifetime = setup_child_process("scheduler", server_args.log_level)
    try:
        loop = SchedulerLoop(server_args, addresses, lifetime)
    except Exception:
        report_fatal(conn, "scheduler failed to start")
        sys.exit(1)
    conn.send({"status": "ready", "stats": loop.stats()})
    watchdog = Watchdog(server_args.watchdog_timeout, lambda message: _tell_parent(conn, message)).start()
    try:
        loop.run_forever(watchdog.feed)
    except Exception:
        report_fatal(conn, "scheduler crashed")
        lifetime.exit(1)
    loop.scheduler.shutdown()  # tells the other tensor-parallel ranks to stop
    lifetime.exit(0)


class SchedulerLoop:
    """Owns the Scheduler's endpoint and its two sockets."""

    def __init__(self, server_args: ServerArgs, addresses: IpcAddresses, lifetime: ChildLifetime) -> None:
        from sgl_runtime.scheduler.scheduler import Scheduler

        self.lifetime = lifetime
        self.scheduler = Scheduler(server_args)
        self.endpoint = SchedulerEndpoint(self.scheduler)
        self.scheduler.constraints.start()  # the compile workers import while the model warms up
        if server_args.skip_server_warmup:
            logger.info("warm-up skipped (--skip-server-warmup)")
        else:
            self.endpoint.warm_up()
        self.scheduler.constraints.start(wait=True)  # ready (and /health 200) only once they can compile
        context = zmq.Context(1)
        self.inbox = make_socket(context, zmq.PULL, addresses.tokenizer_to_scheduler, bind=True)
        self.outbox = make_socket(context, zmq.PUSH, addresses.scheduler_to_detokenizer, bind=False)

    def run_forever(self, on_progress=lambda: None) -> None:
        while self.lifetime.keep_running():
            on_progress()
            idle = not self.scheduler.has_work()
            if not self._process_inbox(block=idle) and idle:
                self.scheduler.model_runner.heartbeat()  # a rank on another node may have died meanwhile
            if self.scheduler.has_work():
                output = self.endpoint.step()
                if output is not None:
                    self.outbox.send_pyobj(output)
        logger.info("scheduler stopping (%s)", "SIGTERM" if self.lifetime.stop_requested else "parent gone")

    def stats(self) -> dict[str, Any]:
        return self.endpoint.stats()

    def _process_inbox(self, block: bool) -> bool:
        """Dispatch every queued message (waiting up to IDLE_POLL_MS for one when `block`); whether any came."""
        if block and not self.inbox.poll(IDLE_POLL_MS):
            return False
        while True:
            try:
                message = self.inbox.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                return True
            try:
                reply = self.endpoint.receive(message)
            except Exception:  # noqa: BLE001 - one bad control message must not end the process
                logger.exception("cannot handle a %s message; ignoring it", type(message).__name__)
                continue
            if reply is not None:
                self.outbox.send_pyobj(reply)


def _tell_parent(conn: Connection, message: str) -> None:
    try:
        conn.send({"status": "error", "message": message})
    except (OSError, ValueError):
        pass
