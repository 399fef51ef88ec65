"""Prometheus metrics of the HTTP server: request latency histograms and token counters observed
in the main process, plus the scheduler's latest statistics exposed as gauges."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREFIX = "sgl_runtime"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _SchedulerStatsCollector:
    """Every numeric field of the scheduler's get_stats() as a gauge, and counters kept elsewhere
    (constraint compiles), read at scrape time."""

    def __init__(self) -> None:
        self.stats: dict[str, Any] = {}
        self.counters: dict[str, float] = {}

    def collect(self) -> Iterator[Any]:
        for key, value in sorted(self.stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield GaugeMetricFamily(f"{PREFIX}_{key}", f"Scheduler statistic {key}", value=float(value))
        for key, value in sorted(self.counters.items()):
            yield CounterMetricFamily(f"{PREFIX}_{key}", f"Counter {key}", value=float(value))


def _histogram(registry: CollectorRegistry, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
    return Histogram(f"{PREFIX}_{name}", doc, buckets=buckets, registry=registry)


def _counter(registry: CollectorRegistry, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    return Counter(f"{PREFIX}_{name}", doc, labels, registry=registry)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._scheduler = _SchedulerStatsCollector()
        self.registry.register(self._scheduler)
        r = self.registry
        self.e2e_latency = _histogram(
            r, "e2e_request_latency_seconds", "Request latency from arrival to finish", LATENCY_BUCKETS
        )
        self.time_to_first_token = _histogram(
            r, "time_to_first_token_seconds", "Time to the first output token", LATENCY_BUCKETS
        )
        self.inter_token_latency = _histogram(
            r, "inter_token_latency_seconds", "Time between consecutive output tokens of a request", TOKEN_BUCKETS
        )
        self.time_per_output_token = _histogram(
            r,
            "time_per_output_token_seconds",
            "Decode time per output token of a finished request (after the first)",
            TOKEN_BUCKETS,
        )
        self.queue_time = _histogram(
            r, "queue_time_seconds", "Time a request waited in the scheduler before its first prefill", LATENCY_BUCKETS
        )
        self.aborted = _counter(
            r, "aborted_requests", "Requests that ended aborted (client gone, timeout, error, shutdown)"
        )
        self.jump_forward_tokens = _counter(
            r, "jump_forward_tokens", "Output tokens forced by a constraint (no forward pass of their own)"
        )
        self.requests = _counter(r, "requests", "Finished requests by finish reason", ("finish_reason",))
        self.prompt_tokens = _counter(r, "prompt_tokens", "Prompt tokens of finished requests")
        self.generation_tokens = _counter(r, "generation_tokens", "Generated tokens of finished requests")
        self.cached_tokens = _counter(r, "cached_tokens", "Prompt tokens served from the prefix cache")

    def observe(self, state, first_output: bool) -> None:
        """Record a request update (called by the TokenizerManager on every output)."""
        if first_output:
            self.time_to_first_token.observe(state.first_output_time - state.created)
        elif state.inter_token_latency is not None and not state.finished:
            self.inter_token_latency.observe(state.inter_token_latency)
        if not state.finished:
            return
        completion = state.counts["completion_tokens"]
        if state.first_output_time is not None and state.last_output_time is not None and completion > 1:
            self.time_per_output_token.observe((state.last_output_time - state.first_output_time) / (completion - 1))
        if state.queue_time is not None:
            self.queue_time.observe(state.queue_time)
        if (state.finished_reason or {}).get("type") == "abort":
            self.aborted.inc()
        if state.request.sampling_params.constraint is not None:
            self.jump_forward_tokens.inc(max(0, completion - state.counts["forward_passes"]))
        self.e2e_latency.observe(state.e2e_latency())
        self.requests.labels(finish_reason=str(state.finished_reason.get("type"))).inc()
        self.prompt_tokens.inc(state.counts["prompt_tokens"])
        self.generation_tokens.inc(state.counts["completion_tokens"])
        self.cached_tokens.inc(state.counts["cached_tokens"])

    def exposition(self, scheduler_stats: dict[str, Any], counters: Optional[dict[str, float]] = None) -> bytes:
        """The Prometheus text format, with the given scheduler statistics as gauges and `counters`
        (name -> running total) as counters."""
        self._scheduler.stats = dict(scheduler_stats)
        self._scheduler.counters = dict(counters or {})
        return generate_latest(self.registry)
