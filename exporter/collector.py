"""The pure function from one scrape's result to Prometheus metric families.

No I/O, no clock, no global state: the same ScrapeResult always gives the same families,
so every metric is tested with hand-built snapshots. Names, types, help and labels come
from the catalogue and nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from platform_common.jobs.redis.memory_policy import MemoryInfo

from . import catalogue
from .server_stats import ServerStats
from .snapshot import LatencyHistogram, Snapshot, TypeSnapshot

__all__ = ["ScrapeResult", "metric_families", "registry_for"]


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
    "oldest_age": lambda t: t.oldest_age_seconds,
    "active_workers": lambda t: t.active_workers,
    "last_heartbeat": lambda t: t.last_heartbeat_seconds,
}


_TYPE_HISTOGRAMS: dict[str, Callable[[TypeSnapshot], LatencyHistogram | None]] = {
    "latency": lambda t: t.latency,
    "wait": lambda t: t.wait,
    "run": lambda t: t.run,
}


# Per-node gauges from INFO memory: catalogue key -> (label values, value).
_MEMORY_GAUGES: dict[str, Callable[[str, MemoryInfo], tuple[list[str], float]]] = {
    "redis_memory_used": lambda node, info: ([node], info.used_bytes),
    "redis_memory_max": lambda node, info: ([node], info.max_bytes),
    "redis_policy_safe": lambda node, info: ([node, info.policy], 0 if info.can_evict else 1),
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


def _family(metric: catalogue.Metric, namespace: str, result: ScrapeResult) -> Metric | None:
    name = metric.full_name(namespace)
    labels = list(metric.labels)
    # OpenMetrics declares a unit when the name carries one (`_seconds`).
    unit = "seconds" if name.endswith("_seconds") else ""
    snapshot = result.snapshot
    if metric.type == "counter":
        counter = CounterMetricFamily(name.removesuffix("_total"), metric.help, labels=labels)
        if metric.key == "malformed":
            counter.add_metric([], result.malformed_total)
        elif snapshot is None:
            return None
        elif metric.key in _SERVER_VALUES:
            if not snapshot.server:
                return None  # INFO refused or unreadable, as for the memory gauges
            for node, stats in snapshot.server.items():
                counter.add_metric([node], _SERVER_VALUES[metric.key](stats))
        elif metric.key == "attempts_failed":
            for type_snapshot in snapshot.types:
                for error_class, count in sorted(type_snapshot.error_classes.items()):
                    counter.add_metric([type_snapshot.agent_type, error_class], count)
        else:
            for type_snapshot in snapshot.types:
                value = type_snapshot.counters.get(metric.key)
                if value is not None:  # malformed in Redis: no sample rather than a wrong one
                    counter.add_metric([type_snapshot.agent_type], value)
        return counter
    if metric.type == "histogram":
        if snapshot is None:
            return None
        histogram = HistogramMetricFamily(name, metric.help, labels=labels, unit=unit)
        for type_snapshot in snapshot.types:
            observed = _TYPE_HISTOGRAMS[metric.key](type_snapshot)
            if observed is not None:
                buckets = [(_le(bound), count) for bound, count in observed.buckets]
                histogram.add_metric([type_snapshot.agent_type], buckets, observed.sum)
        return histogram
    gauge = GaugeMetricFamily(name, metric.help, labels=labels, unit=unit)
    if metric.key == "redis_up":
        gauge.add_metric([], 0 if snapshot is None else 1)
    elif metric.key == "scrape_duration":
        gauge.add_metric([], result.duration_seconds)
    elif snapshot is None:
        return None
    elif metric.key == "types_dropped":
        gauge.add_metric([], snapshot.types_dropped)
    elif metric.key in _MEMORY_GAUGES:
        if not snapshot.memory:
            return None  # INFO memory refused or unreadable: no sample rather than a guess
        for node, info in snapshot.memory.items():
            gauge.add_metric(*_MEMORY_GAUGES[metric.key](node, info))
    elif metric.key in _SERVER_VALUES:
        if not snapshot.server:
            return None
        for node, stats in snapshot.server.items():
            gauge.add_metric([node], _SERVER_VALUES[metric.key](stats))
    elif metric.key == "worker_heartbeat_age":
        for type_snapshot in snapshot.types:
            for beat in type_snapshot.workers:
                gauge.add_metric([type_snapshot.agent_type, beat.worker], beat.age_seconds)
    else:
        value_of = _TYPE_GAUGES[metric.key]
        for type_snapshot in snapshot.types:
            reading = value_of(type_snapshot)
            if reading is not None and math.isfinite(reading):
                gauge.add_metric([type_snapshot.agent_type], reading)
    return gauge


def _le(bound: float) -> str:
    # The `le` label as Prometheus' own clients write it: "0.5", "30.0", "+Inf".
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
