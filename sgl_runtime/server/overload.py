"""Overload protection of the main process: a bound on the sequences in flight (running capacity
plus --max-queued-requests; beyond it a 503 with Retry-After), a cap on the sequences of one
request (prompts x n), per-request deadlines, and refusing new work while the server drains."""

from __future__ import annotations

import math
import time
from typing import Any, Optional

from sgl_runtime.sampling_params import InvalidRequestError


class ServerBusyError(Exception):
    """The server cannot take the request now (HTTP 503 with Retry-After)."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTimeoutError(Exception):
    """A request ran past its deadline and was aborted (HTTP 408)."""


class AdmissionGate:
    """Counts the sequences in flight; `admit` refuses what would exceed the bound."""

    def __init__(self, max_queued: Optional[int], max_per_request: int, capacity: int = 0) -> None:
        self.max_queued = max_queued
        self.max_per_request = max_per_request
        self.capacity = capacity  # the scheduler's running capacity (max_running_requests), once known
        self.in_flight = 0
        self.draining = False
        self.rejected = 0

    @property
    def limit(self) -> Optional[int]:
        return None if self.max_queued is None else self.capacity + self.max_queued

    def check_size(self, sequences: int, prompts: int) -> None:
        if sequences > self.max_per_request:
            raise InvalidRequestError(
                f"n: {prompts} prompt(s) give {sequences} sequences, more than the server's limit of "
                f"{self.max_per_request} per request (--max-sequences-per-request)"
            )

    def admit(self, sequences: int) -> None:
        """Count `sequences` in; raise ServerBusyError when draining or full. Pair with `release`."""
        if self.draining:
            self.rejected += 1
            raise ServerBusyError("the server is shutting down and accepts no new requests", retry_after_s=5)
        limit = self.limit
        if limit is not None and self.in_flight + sequences > limit:
            self.rejected += 1
            raise ServerBusyError(
                f"the server is overloaded: {self.in_flight} sequences in flight, the queue "
                f"holds {self.max_queued} beyond the running capacity of {self.capacity}; "
                "retry later"
            )
        self.in_flight += sequences

    def release(self, sequences: int) -> None:
        self.in_flight -= sequences


def request_deadline(timeout: Any, default: Optional[float], arrival: float) -> Optional[float]:
    """The perf_counter time by which a request must finish (None: no deadline)."""
    if timeout is None:
        timeout = default
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidRequestError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    return arrival + float(timeout)


def seconds_left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else deadline - time.perf_counter()
