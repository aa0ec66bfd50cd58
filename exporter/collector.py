"""The pure functions from one scrape's result to each metric's samples
(value_series, histogram_series) and to Prometheus metric families (for the formats
page.py does not write). No I/O, no clock, no global state: every metric is tested with
hand-built snapshots. Names, types, help and labels come from the catalogue alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar

from platform_common.jobs import metric_catalogue as catalogue
from platform_common.jobs.redis.memory_policy import MemoryInfo

from .server_stats import ServerStats
from .snapshot import LatencyHistogram, Snapshot, TypeSnapshot
from .stats_hash import BucketExemplar

__all__ = [
    "EXEMPLAR_TRACE_ID",
    "ScrapeResult",
    "Series",
    "histogram_series",
    "metric_families",
    "registry_for",
    "type_reading",
    "value_series",
]


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """What a scrape knows: the snapshot (None when Redis could not be read) and the
    exporter's own numbers."""

    snapshot: Snapshot | None
    duration_seconds: float
    """How long reading Redis took (or failed to)."""
    malformed_total: int = 0
    """Malformed values skipped since the exporter started (a counter)."""


# Per-type gauges: catalogue key -> value (None: no sample for this type).
_TYPE_GAUGES: dict[str, Callable[[TypeSnapshot], float | None]] = {
    "queue_depth": lambda t: t.queue_depth,
    "dead_letter_depth": lambda t: t.dead_letter_depth,
    "in_progress": lambda t: t.in_progress,
    "delayed_depth": lambda t: t.delayed_depth,
    "paused": lambda t: 1 if t.paused else 0,
    "rate_limit": lambda t: t.rate_limit,
    "max_running_limit": lambda t: t.max_running_limit,
    "max_running_per_key_limit": lambda t: t.max_running_per_key_limit,
    "fair_keys_waiting": lambda t: t.fair_keys_waiting,  # HLEN: exact, 0 without fair share
    "fair_key_oldest_wait": lambda t: t.fair.oldest_wait_seconds if t.fair else None,
    "fair_key_median_wait": lambda t: t.fair.median_wait_seconds if t.fair else None,
    "oldest_age": lambda t: t.oldest_age_seconds,
    "active_workers": lambda t: t.active_workers,
    "last_heartbeat": lambda t: t.last_heartbeat_seconds,
}


_TYPE_HISTOGRAMS: dict[str, Callable[[TypeSnapshot], LatencyHistogram | None]] = {
    "latency": lambda t: t.latency,
    "wait": lambda t: t.wait,
    "run": lambda t: t.run,
}


EXEMPLAR_TRACE_ID = "trace_id"
"""The label of a bucket's exemplar that names its job's trace (Grafana links it)."""

Series = tuple[tuple[str, ...], float]
"""One sample: its label values (in the metric's label order) and its value."""

# Per-node gauges from INFO memory: catalogue key -> (label values, value).
_MEMORY_GAUGES: dict[str, Callable[[str, MemoryInfo], Series]] = {
    "redis_memory_used": lambda node, info: ((node,), info.used_bytes),
    "redis_memory_max": lambda node, info: ((node,), info.max_bytes),
    "redis_policy_safe": lambda node, info: ((node, info.policy), 0 if info.can_evict else 1),
}

# Per-node values from INFO clients and stats: catalogue key -> value.
_SERVER_VALUES: dict[str, Callable[[ServerStats], int]] = {
    "redis_clients": lambda stats: stats.connected_clients,
    "redis_blocked_clients": lambda stats: stats.blocked_clients,
    "redis_evicted_keys": lambda stats: stats.evicted_keys,
}


def metric_families(result: ScrapeResult, namespace: str = "") -> list[Metric]:
    """Every catalogue metric this result has values for, in catalogue order.

    When Redis was unreachable only the exporter's own metrics are present: no number
    from an earlier scrape is ever presented as current.
    """
    families = (_family(metric, namespace, result) for metric in catalogue.CATALOGUE)
    return [family for family in families if family is not None]


def registry_for(families: list[Metric]) -> CollectorRegistry:
    """A fresh registry holding `families` (one per request; never the global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return registry


def value_series(metric: catalogue.Metric, result: ScrapeResult) -> list[Series] | None:
    """The samples of gauge or counter `metric` in `result`, in exposition order, or
    None when the metric (its family too) is absent: for metric_families and page.py."""
    snapshot = result.snapshot
    key = metric.key
    if key == "malformed":
        return [((), result.malformed_total)]
    if key == "redis_up":
        return [((), 0 if snapshot is None else 1)]
    if key == "scrape_duration":
        return [((), result.duration_seconds)]
    if snapshot is None:
        return None
    if key == "types_dropped":
        return [((), snapshot.types_dropped)]
    if key in _MEMORY_GAUGES:
        if not snapshot.memory:
            return None  # INFO memory refused or unreadable: no sample rather than a guess
        memory_value = _MEMORY_GAUGES[key]
        return [memory_value(node, info) for node, info in snapshot.memory.items()]
    if key in _SERVER_VALUES:
        if not snapshot.server:
            return None  # INFO refused or unreadable, as for the memory gauges
        server_value = _SERVER_VALUES[key]
        return [((node,), server_value(stats)) for node, stats in snapshot.server.items()]
    if key == "attempts_failed":
        return [
            ((t.agent_type, error_class), count)
            for t in snapshot.types
            for error_class, count in sorted(t.error_classes.items())
        ]
    if key == "depth_by_priority":
        return [((t.agent_type, level), count) for t in snapshot.types
                for level, count in t.depth_by_priority.items()]  # fmt: skip
    if key == "fair_share_by":
        return [((t.agent_type, t.fair_by), 1) for t in snapshot.types if t.fair_by]
    if key == "fair_key_backlog":
        return [((t.agent_type, fair_key), backlog) for t in snapshot.types if t.fair
                for fair_key, backlog in t.fair.top_backlogs]  # fmt: skip
    if key == "worker_heartbeat_age":
        return [((t.agent_type, beat.worker), beat.age_seconds) for t in snapshot.types
                for beat in t.workers]  # fmt: skip
    if key == "worker_jobs":
        # No sample for a worker whose count is unknown (an older worker version).
        return [((t.agent_type, beat.worker), beat.jobs_in_progress) for t in snapshot.types
                for beat in t.workers if beat.jobs_in_progress is not None]  # fmt: skip
    reading = _TYPE_READINGS[key]
    pairs = ((t.agent_type, reading(t)) for t in snapshot.types)
    return [((agent_type,), value) for agent_type, value in pairs if value is not None]


def type_reading(metric: catalogue.Metric) -> Callable[[TypeSnapshot], float | None] | None:
    """For a metric with one sample per agent type (its only label): a type's sample
    value, None for no sample; for any other metric, None. value_series' own values."""
    return _TYPE_READINGS.get(metric.key)


def _finite(
    value_of: Callable[[TypeSnapshot], float | None],
) -> Callable[[TypeSnapshot], float | None]:
    def reading(type_snapshot: TypeSnapshot) -> float | None:
        value = value_of(type_snapshot)
        # Unknown (None) or not a number: no sample rather than a made-up one.
        return value if value is not None and math.isfinite(value) else None

    return reading


def _counter(key: str) -> Callable[[TypeSnapshot], float | None]:
    # A counter malformed in Redis is absent: no sample rather than a wrong one.
    return lambda type_snapshot: type_snapshot.counters.get(key)


_TYPE_READINGS: dict[str, Callable[[TypeSnapshot], float | None]] = {
    **{key: _finite(value_of) for key, value_of in _TYPE_GAUGES.items()},
    **{metric.key: _counter(metric.key) for metric in catalogue.CATALOGUE
       if metric.type == "counter" and metric.labels == (catalogue.AGENT_TYPE,)},
}  # fmt: skip


def histogram_series(
    metric: catalogue.Metric, result: ScrapeResult
) -> list[tuple[tuple[str, ...], LatencyHistogram]] | None:
    """The histograms of histogram `metric` in `result` by label values, or None when
    the metric is absent (Redis was not read)."""
    if result.snapshot is None:
        return None
    observed_of = _TYPE_HISTOGRAMS[metric.key]
    observed = ((t.agent_type, observed_of(t)) for t in result.snapshot.types)
    return [((agent_type,), h) for agent_type, h in observed if h is not None]


def _family(metric: catalogue.Metric, namespace: str, result: ScrapeResult) -> Metric | None:
    name = metric.full_name(namespace)
    labels = list(metric.labels)
    # OpenMetrics declares a unit when the name carries one (`_seconds`).
    unit = "seconds" if name.endswith("_seconds") else ""
    if metric.type == "histogram":
        histograms = histogram_series(metric, result)
        if histograms is None:
            return None
        histogram = HistogramMetricFamily(name, metric.help, labels=labels, unit=unit)
        for label_values, observed in histograms:
            exemplars = dict(observed.exemplars)
            buckets: list[Any] = [
                (_le(bound), count)
                if bound not in exemplars
                else (_le(bound), count, _exemplar(exemplars[bound]))
                for bound, count in observed.buckets
            ]
            histogram.add_metric(list(label_values), buckets, observed.sum)
        return histogram
    series = value_series(metric, result)
    if series is None:
        return None
    family: CounterMetricFamily | GaugeMetricFamily
    if metric.type == "counter":
        family = CounterMetricFamily(name.removesuffix("_total"), metric.help, labels=labels)
    else:
        family = GaugeMetricFamily(name, metric.help, labels=labels, unit=unit)
    for label_values, value in series:
        family.add_metric(list(label_values), value)
    return family


def _exemplar(exemplar: BucketExemplar) -> Exemplar:
    # Only the OpenMetrics encoder writes exemplars; the text format has none.
    return Exemplar({EXEMPLAR_TRACE_ID: exemplar.trace_id}, exemplar.value, exemplar.timestamp)


def _le(bound: float) -> str:
    # The `le` label as Prometheus' own clients write it: "0.5", "30.0", "+Inf".
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
