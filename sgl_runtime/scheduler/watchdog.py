"""The scheduler's watchdog: a thread that ends the scheduler process with an error when its loop
has made no progress for `timeout` seconds (a hung forward or a deadlock), so the server stops
with a message instead of stalling silently; the parent sees the exit and fails every request."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

logger = logging.getLogger(__name__)

WATCHDOG_EXIT_CODE = 3


class Watchdog:
    def __init__(self, timeout: float, on_hang: Callable[[str], None]) -> None:
        self.timeout = timeout
        self._on_hang = on_hang
        self._last_progress = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduler-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def feed(self) -> None:
        """The loop made progress (call once per iteration)."""
        self._last_progress = time.monotonic()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(min(1.0, self.timeout / 4)):
            stalled = time.monotonic() - self._last_progress
            if stalled > self.timeout:
                message = (
                    f"scheduler watchdog: no progress for {stalled:.1f} s (--watchdog-timeout "
                    f"{self.timeout:g}); the scheduler is hung, ending it"
                )
                logger.error(message)
                self._on_hang(message)
                logging.shutdown()
                os._exit(WATCHDOG_EXIT_CODE)
