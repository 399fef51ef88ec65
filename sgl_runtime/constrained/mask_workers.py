"""A batch's host-built masks on worker threads, started before the forward and awaited at sampling.

Grammar (pushdown) masks and DFA states visited for the first time are built on the host. The
scheduler hands the batch's cursors to `prefetch` before it launches the forward; the workers
build those masks (one task per constraint, as a constraint's caches are guarded by its lock;
distinct constraints in parallel, numpy sections outside the GIL) while the scheduler thread
launches the forward and the device computes it. `wait` then blocks until they are done, and
the sampler's own bitmask() calls are cache hits.
"""

from __future__ import annotations

import concurrent.futures
from typing import Sequence

DEFAULT_WORKERS = 4


class MaskWorkers:
    """A small thread pool that warms constraint mask caches for the next sampling."""

    def __init__(self, workers: int = DEFAULT_WORKERS) -> None:
        self.workers = workers
        self._pool: "concurrent.futures.ThreadPoolExecutor | None" = None
        self._pending: list[concurrent.futures.Future] = []
        self.prefetched = 0  # cursors handed to the workers so far

    def prefetch(self, matchers: Sequence) -> None:
        """Start building the masks of `matchers` (None entries skipped) whose masks are not cached."""
        groups: dict[int, list] = {}
        for matcher in matchers:
            if matcher is not None and _needs_host_work(matcher):
                groups.setdefault(id(matcher.constraint), []).append(matcher)
        if not groups:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="mask-worker")
        for group in groups.values():
            self._pending.append(self._pool.submit(_build_masks, group))
            self.prefetched += len(group)

    def wait(self) -> None:
        """Block until every prefetch is done (a failed one re-raises when its cursor's mask is asked)."""
        pending, self._pending = self._pending, []
        concurrent.futures.wait(pending)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _needs_host_work(matcher) -> bool:
    """Grammar cursors always (their cache is checked under the constraint's lock); a DFA cursor
    only on its state's first visit."""
    if getattr(matcher, "finished", False):
        return False
    index = getattr(matcher.constraint, "index", None)
    if index is None:
        return True
    return not index.is_cached(matcher.state)


def _build_masks(matchers: list) -> None:
    for matcher in matchers:
        try:
            matcher.bitmask()
        except Exception:  # noqa: BLE001 - the sampler's own call raises it for that request
            return
