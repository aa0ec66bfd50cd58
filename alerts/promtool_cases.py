"""Boundary cases that prove each alert's threshold and `for` with `promtool test rules`.

Per alert: input series that breach the threshold (the alert must not fire one second
before `onset + for`, and must fire at exactly `onset + for`), and quiet variants at or
just under the threshold (never fire). Exact value boundaries (depth == threshold,
age == TTL) are used where PromQL arithmetic is exact; ratios of rates use values
clearly on each side. Series names come from the catalogue.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from platform_common.jobs_exporter.catalogue import by_key
from platform_common.jobs_monitoring import queries as q
from platform_common.jobs_monitoring.config import MonitoringConfig

__all__ = ["AGENT_TYPE", "INSTANCE", "BoundaryCase", "Scenario", "boundary_cases", "seconds"]

AGENT_TYPE = "dining"
INSTANCE = "queue-exporter:9808"
SAMPLES = 30
"""Samples per input series (one a minute), past the longest onset + for + margin."""

Series = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Scenario:
    """Input series, and what the alert carries when it fires on them."""

    series: tuple[Series, ...]
    labels: dict[str, str]
    value_text: str = ""
    """The alert's value after the spec's humanize filter (firing scenarios only)."""


@dataclass(frozen=True, slots=True)
class BoundaryCase:
    onset: int
    """Seconds until the expression first holds (rates need two samples: 60)."""
    firing: Scenario
    quiet: tuple[Scenario, ...]


def seconds(duration: str) -> int:
    """'1h2m3s' -> 3723."""
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


def humanize(value: float) -> str:
    """Prometheus' `humanize` template function (SI prefixes, 4 significant digits)."""
    if value == 0 or math.isnan(value) or math.isinf(value):
        return f"{value:.4g}"
    prefix = ""
    if abs(value) >= 1:
        for candidate in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(value) < 1000:
                break
            prefix, value = candidate, value / 1000
    else:
        for candidate in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(value) >= 1:
                break
            prefix, value = candidate, value * 1000
    return f"{value:.4g}{prefix}"


def humanize_percentage(value: float) -> str:
    return f"{value * 100:.4g}%"


class _Builder:
    """Series literals for one config: `name{labels}` from the catalogue."""

    def __init__(self, config: MonitoringConfig) -> None:
        self.config = config
        self.by_type = {"agent_type": AGENT_TYPE, "job": config.job}
        self.by_target = {"instance": INSTANCE, "job": config.job}

    def series(self, key: str | None, values: str, suffix: str = "", **extra: str) -> Series:
        if key is None:
            name, labels = q.PROMETHEUS_UP, dict(self.by_target)
        else:
            metric = by_key(key)
            name = metric.full_name(self.config.namespace) + suffix
            labels = {"instance": INSTANCE, "job": self.config.job}
            if "agent_type" in metric.labels:
                labels["agent_type"] = AGENT_TYPE
        labels.update(extra)
        body = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{name}{{{body}}}", values

    def depth(self, value: float) -> Series:
        # Every per-type case carries a depth series: the per-type limit's default
        # side (`group by (agent_type) (queue_depth)`) needs it.
        return self.series("queue_depth", f"{q.number(value)}x{SAMPLES}")


def _gauge_case(
    key: str, over: float, at: float, fmt: Callable[[float], str]
) -> Callable[[_Builder], BoundaryCase]:
    def build(b: _Builder) -> BoundaryCase:
        extra = () if key == "queue_depth" else (b.depth(0),)
        firing = Scenario(
            (b.series(key, f"{q.number(over)}x{SAMPLES}"), *extra), b.by_type, fmt(over)
        )
        quiet = Scenario((b.series(key, f"{q.number(at)}x{SAMPLES}"), *extra), b.by_type)
        return BoundaryCase(0, firing, (quiet,))

    return build


def _target_case(key: str | None) -> Callable[[_Builder], BoundaryCase]:
    def build(b: _Builder) -> BoundaryCase:
        firing = Scenario((b.series(key, f"0x{SAMPLES}"),), b.by_target, "0")
        quiet = Scenario((b.series(key, f"1x{SAMPLES}"),), b.by_target)
        return BoundaryCase(0, firing, (quiet,))

    return build


def _absent_case(b: _Builder) -> BoundaryCase:
    other = b.series(None, f"1x{SAMPLES}", job=f"not-{b.config.job}")
    firing = Scenario((other,), {"job": b.config.job}, "1")
    # Present (even while down) is the boundary: absent() must stay empty.
    quiet = Scenario((b.series(None, f"0x{SAMPLES}"),), {})
    return BoundaryCase(0, firing, (quiet,))


def _no_workers_case(b: _Builder) -> BoundaryCase:
    def scenario(depth: int, workers: int) -> tuple[Series, ...]:
        return (b.depth(depth), b.series("active_workers", f"{workers}x{SAMPLES}"))

    firing = Scenario(scenario(5, 0), b.by_type, humanize(5))
    return BoundaryCase(
        0, firing, (Scenario(scenario(0, 0), b.by_type), Scenario(scenario(5, 1), b.by_type))
    )


def _latency_case(b: _Builder) -> BoundaryCase:
    slo = b.config.latency_slos().get(AGENT_TYPE, b.config.default_latency_slo)
    bounds = (slo / 2, slo, slo * 2, math.inf)

    def scenario(first_filled: int) -> tuple[Series, ...]:
        # 10 completions a minute, all in bucket `first_filled` (cumulative buckets).
        out = [b.depth(0)]
        for index, bound in enumerate(bounds):
            le = "+Inf" if math.isinf(bound) else q.number(bound)
            values = f"0+10x{SAMPLES}" if index >= first_filled else f"0x{SAMPLES}"
            out.append(b.series("latency", values, "_bucket", le=le))
        return tuple(out)

    # All in (slo, 2 slo]: p95 = slo + 0.95 slo. All in (slo/2, slo]: p95 = 0.975 slo.
    firing = Scenario(scenario(2), b.by_type, humanize_percentage(1.95))
    return BoundaryCase(60, firing, (Scenario(scenario(1), b.by_type),))


def _failure_ratio_case(b: _Builder) -> BoundaryCase:
    threshold = b.config.failure_ratio_high

    def scenario(failed_per_100: int) -> tuple[Series, ...]:
        return (
            b.series("failed", f"0+{failed_per_100}x{SAMPLES}"),
            b.series("completed", f"0+{100 - failed_per_100}x{SAMPLES}"),
        )

    over = min(100, math.ceil(threshold * 200))
    under = math.floor(threshold * 50)
    firing = Scenario(scenario(over), b.by_type, humanize_percentage(over / 100))
    return BoundaryCase(60, firing, (Scenario(scenario(under), b.by_type),))


def _oldest_case(b: _Builder) -> BoundaryCase:
    ttl = b.config.job_ttls().get(AGENT_TYPE, b.config.job_ttl_seconds)

    def scenario(age: float) -> tuple[Series, ...]:
        return (b.depth(1), b.series("oldest_age", f"{q.number(age)}x{SAMPLES}"))

    firing = Scenario(scenario(ttl + 1), b.by_type, humanize_percentage((ttl + 1) / ttl))
    # Exactly the TTL: age / ttl == 1, which is not > 1.
    return BoundaryCase(0, firing, (Scenario(scenario(ttl), b.by_type),))


NODE = "queue-redis:6379"


def _eviction_policy_case(b: _Builder) -> BoundaryCase:
    def scenario(policy: str, safe: int) -> Scenario:
        series = b.series("redis_policy_safe", f"{safe}x{SAMPLES}", node=NODE, policy=policy)
        return Scenario((series,), {"job": b.config.job, "node": NODE, "policy": policy}, "0")

    return BoundaryCase(0, scenario("allkeys-lru", 0), (scenario("noeviction", 1),))


def _redis_memory_case(b: _Builder) -> BoundaryCase:
    limit = 1_000_000
    threshold = b.config.redis_memory_high
    labels = {"job": b.config.job, "node": NODE}

    def scenario(used: int, maxmemory: int) -> tuple[Series, ...]:
        return (
            b.series("redis_memory_used", f"{used}x{SAMPLES}", node=NODE),
            b.series("redis_memory_max", f"{maxmemory}x{SAMPLES}", node=NODE),
        )

    over = math.floor(threshold * limit) + 1
    under = math.ceil(threshold * limit) - 1
    firing = Scenario(scenario(over, limit), labels, humanize_percentage(over / limit))
    # Just under the threshold, and a node without a limit (maxmemory 0: no ratio at all).
    quiet = (Scenario(scenario(under, limit), labels), Scenario(scenario(over, 0), labels))
    return BoundaryCase(0, firing, quiet)


def boundary_cases(config: MonitoringConfig) -> dict[str, BoundaryCase]:
    """One case per alert name of `alert_specs(config)`."""
    b = _Builder(config)
    depth_high = config.queue_depth_high
    builders: dict[str, Callable[[_Builder], BoundaryCase]] = {
        "QueueDepthHigh": _gauge_case("queue_depth", depth_high + 1, depth_high, humanize),
        "QueueIdle": _gauge_case("queue_depth", 0, 1, humanize),
        "JobLatencyP95AboveSLO": _latency_case,
        "DeadLetterDepthHigh": _gauge_case(
            "dead_letter_depth", config.dead_letter_high + 1, config.dead_letter_high, humanize
        ),
        "QueueExporterDown": _target_case(None),
        "QueueExporterAbsent": _absent_case,
        "QueueRedisUnreachable": _target_case("redis_up"),
        "QueueNoActiveWorkers": _no_workers_case,
        "JobFailureRatioHigh": _failure_ratio_case,
        "OldestJobOlderThanTTL": _oldest_case,
        "QueueRedisEvictionPolicyUnsafe": _eviction_policy_case,
        "QueueRedisMemoryHigh": _redis_memory_case,
    }
    return {name: build(b) for name, build in builders.items()}
