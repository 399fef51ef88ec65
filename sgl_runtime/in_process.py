"""The whole pipeline in one thread, for the offline Engine: the tokenizer manager's messages are
handed straight to the scheduler's endpoint, and whenever the tokenizer manager waits for output
the scheduler steps and the detokenizer converts what it produced. Between calls nothing runs,
so the Engine's scheduler is idle whenever no `generate` is in progress."""

from __future__ import annotations

import asyncio
import collections

from sgl_runtime.detokenizer.detokenizer_manager import DetokenizerManager
from sgl_runtime.scheduler.scheduler_endpoint import SchedulerEndpoint


class InProcessTransport:
    """The tokenizer manager's transport: `send(message)`, `await recv()` (the messages ready)."""

    def __init__(self, endpoint: SchedulerEndpoint, detokenizer: DetokenizerManager) -> None:
        self._endpoint = endpoint
        self._detokenizer = detokenizer
        self._ready: collections.deque = collections.deque()
        self._wake: asyncio.Event

    def start(self) -> None:
        self._wake = asyncio.Event()

    def send(self, message: object) -> None:
        reply = self._endpoint.receive(message)
        if reply is not None:
            self._ready.append(reply)
        self._wake.set()

    async def recv(self) -> list[object]:
        while not self._ready:
            if self._endpoint.scheduler.has_work():
                output = self._endpoint.step()
                if output is not None:
                    self._ready.append(self._detokenizer.process(output))
                await asyncio.sleep(0)  # the waiting handlers run between steps
            else:
                self._wake.clear()
                await self._wake.wait()
        ready = list(self._ready)
        self._ready.clear()
        return ready
