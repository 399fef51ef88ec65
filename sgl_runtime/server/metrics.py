"""Prometheus metrics of the HTTP server: request latency histograms and token counters observed
in the main process, plus the scheduler's latest statistics exposed as gauges."""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

PREFIX = "sgl_runtime"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _SchedulerStatsCollector:
    """Every numeric field of the scheduler's get_stats() as a gauge, read at scrape time."""

    def __init__(self) -> None:
        self.stats: dict[str, Any] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for key, value in sorted(self.stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield GaugeMetricFamily(f"{PREFIX}_{key}", f"Scheduler statistic {key}", value=float(value))


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._scheduler = _SchedulerStatsCollector()
        self.registry.register(self._scheduler)
        r = self.registry
        self.e2e_latency = Histogram(f"{PREFIX}_e2e_request_latency_seconds", "Request latency from arrival to finish",
                                     buckets=LATENCY_BUCKETS, registry=r)
        self.time_to_first_token = Histogram(f"{PREFIX}_time_to_first_token_seconds", "Time to the first output token",
                                             buckets=LATENCY_BUCKETS, registry=r)
        self.requests = Counter(f"{PREFIX}_requests", "Finished requests by finish reason", ["finish_reason"], registry=r)
        self.prompt_tokens = Counter(f"{PREFIX}_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter(f"{PREFIX}_generation_tokens", "Generated tokens of finished requests", registry=r)
        self.cached_tokens = Counter(f"{PREFIX}_cached_tokens", "Prompt tokens served from the prefix cache", registry=r)

    def observe(self, state, first_output: bool) -> None:
        """Record a request update (called by the TokenizerManager on every output)."""
        if first_output:
            self.time_to_first_token.observe(state.first_output_time - state.created)
        if not state.finished:
            return
        self.e2e_latency.observe(state.e2e_latency())
        self.requests.labels(finish_reason=str(state.finished_reason.get("type"))).inc()
        self.prompt_tokens.inc(state.counts["prompt_tokens"])
        self.generation_tokens.inc(state.counts["completion_tokens"])
        self.cached_tokens.inc(state.counts["cached_tokens"])

    def exposition(self, scheduler_stats: dict[str, Any]) -> bytes:
        """The Prometheus text format, with the given scheduler statistics as gauges."""
        self._scheduler.stats = dict(scheduler_stats)
        return generate_latest(self.registry)
