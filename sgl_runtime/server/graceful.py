"""Stopping the HTTP server well: on SIGTERM stop taking requests (503), let those in flight finish
for up to the drain timeout, then end the rest with an error event (their clients are told, never
cut off silently) before uvicorn closes the connections. A child's death skips the drain."""

from __future__ import annotations

import asyncio
import logging
import time

import uvicorn

logger = logging.getLogger(__name__)

DRAIN_POLL_S = 0.05
FLUSH_ERRORS_S = 0.3  # time for streams to write their error event before connections close


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, tokenizer_manager, drain_timeout: float) -> None:
        super().__init__(config)
        self.tm = tokenizer_manager
        self.drain_timeout = drain_timeout
        self.failure: str = ""  # set (from any thread, then should_exit) when a child process died

    async def shutdown(self, sockets=None) -> None:
        self.tm.admission.draining = True
        if not self.failure:
            await self._drain()
        message = f"the server stopped: {self.failure}" if self.failure else "the server is shutting down"
        failed = self.tm.fail_all(message, code=503)
        if failed:
            logger.warning("ended %d request(s) still in flight: %s", failed, message)
            await asyncio.sleep(FLUSH_ERRORS_S)
        await super().shutdown(sockets)

    async def _drain(self) -> None:
        in_flight = self.tm.in_flight_count()
        if not in_flight:
            return
        logger.info("draining: waiting up to %g s for %d request(s) in flight", self.drain_timeout, in_flight)
        deadline = time.monotonic() + self.drain_timeout
        while self.tm.in_flight_count() and time.monotonic() < deadline and not self.force_exit:  # 2nd Ctrl-C
            await asyncio.sleep(DRAIN_POLL_S)
