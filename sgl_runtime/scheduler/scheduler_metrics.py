"""Counters the scheduler keeps for its periodic log line and get_stats()."""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("sgl_runtime.scheduler")


class SchedulerMetrics:
    """Prompt/cache-hit token counts, generated tokens, and decode throughput over the last interval."""

    def __init__(self, log_interval: int) -> None:
        self.log_interval = max(1, log_interval)
        self.prompt_tokens = 0  # tokens admitted to prefill batches (cached + computed)
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.decode_steps = 0
        self.num_retractions = 0
        self.overlapped_steps = 0  # decode steps launched before the previous step's tokens were read
        self._interval_tokens = 0
        self._interval_start = time.monotonic()
        self.last_throughput = 0.0

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def stats(self, **current) -> dict:
        """The counters plus the scheduler's `current` figures, for get_stats()."""
        return {
            **current,
            "cache_hit_rate": self.cache_hit_rate,
            "gen_throughput": self.last_throughput,
            "generated_tokens": self.generated_tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "num_retractions": self.num_retractions,
            "overlapped_steps": self.overlapped_steps,
        }

    def on_prefill(self, cached: int, computed: int) -> None:
        self.cached_tokens += cached
        self.prompt_tokens += cached + computed

    def on_tokens(self, generated: int) -> None:
        self.generated_tokens += generated
        self._interval_tokens += generated

    def on_decode_step(self, batch_size: int, num_tokens: int, token_usage: float, num_waiting: int) -> None:
        self.decode_steps += 1
        if self.decode_steps % self.log_interval:
            return
        now = time.monotonic()
        self.last_throughput = self._interval_tokens / max(now - self._interval_start, 1e-9)
        self._interval_tokens, self._interval_start = 0, now
        logger.info(
            "decode: batch %d, waiting %d, kv tokens %d, token usage %.2f, cache hit rate %.2f, "
            "gen throughput %.1f tok/s",
            batch_size,
            num_waiting,
            num_tokens,
            token_usage,
            self.cache_hit_rate,
            self.last_throughput,
        )
