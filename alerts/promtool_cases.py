"""Boundary cases that prove each alert's threshold and `for` with `promtool test rules`.

Per alert: input series that breach the threshold (the alert must not fire one second
before `onset + for`, and must fire at exactly `onset + for`), and quiet variants at or
just under the threshold (never fire). Exact value boundaries (depth == threshold,
age == TTL) are used where PromQL arithmetic is exact; ratios of rates use values
clearly on each side. Some alerts add timelines: a story told sample by sample (traffic,
then none) with the times the alert must and must not fire. Series names come from the
catalogue.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from platform_common.jobs.metric_catalogue import by_key
from platform_common.jobs_monitoring import queries as q
from platform_common.jobs_monitoring.config import MonitoringConfig

__all__ = [
    "AGENT_TYPE",
    "INSTANCE",
    "BoundaryCase",
    "Scenario",
    "Timeline",
    "boundary_cases",
    "seconds",
]

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
    """The alert's value after the alert spec's humanize filter (firing scenarios only)."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """Series that change over time, and whether the alert fires at each evaluation."""

    scenario: Scenario
    checks: tuple[tuple[int, bool], ...]
    """(seconds from the start, firing?) pairs."""


@dataclass(frozen=True, slots=True)
class BoundaryCase:
    onset: int
    """Seconds until the expression first holds (rates need two samples: 60)."""
    firing: Scenario
    quiet: tuple[Scenario, ...]
    timelines: tuple[Timeline, ...] = ()


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


def humanize_duration(value: float) -> str:
    """Prometheus' `humanizeDuration` for a value of one second or more."""
    whole = int(value)
    days, hours = whole // 86_400, whole // 3600 % 24
    minutes, secs = whole // 60 % 60, whole % 60
    if days:
        return f"{days}d {hours}h {minutes}m {secs}s"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{value:.4g}s"


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


def _gauge_case(key: str, over: float, at: float) -> Callable[[_Builder], BoundaryCase]:
    def build(b: _Builder) -> BoundaryCase:
        extra = () if key == "queue_depth" else (b.depth(0),)
        firing = Scenario(
            (b.series(key, f"{q.number(over)}x{SAMPLES}"), *extra), b.by_type, humanize(over)
        )
        quiet = Scenario((b.series(key, f"{q.number(at)}x{SAMPLES}"), *extra), b.by_type)
        return BoundaryCase(0, firing, (quiet,))

    return build


def _target_case(key: str | None, over: int, at: int) -> Callable[[_Builder], BoundaryCase]:
    """A per-target series (`up` when `key` is None) at `over`, firing, and at `at`."""

    def build(b: _Builder) -> BoundaryCase:
        firing = Scenario((b.series(key, f"{over}x{SAMPLES}"),), b.by_target, humanize(over))
        quiet = Scenario((b.series(key, f"{at}x{SAMPLES}"),), b.by_target)
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


BUSY_PER_MINUTE = 660
"""11 jobs/s, the traffic QueueIdle once fired on because the queue list stayed empty."""
BUSY_IN_PROGRESS = (5, 7, 6)
"""Jobs in progress at successive scrapes of that traffic."""
IDLE_STOPS_AT = 10
"""Minute of the idle timeline's first sample with no traffic."""


def _idle_series(
    b: _Builder, enqueued: str, in_progress: str, depth: str = f"0x{SAMPLES}"
) -> tuple[Series, ...]:
    return (
        b.series("enqueued", enqueued),
        b.series("started", enqueued),  # taken as fast as they come
        b.series("queue_depth", depth),
        b.series("delayed_depth", f"0x{SAMPLES}"),
        b.series("in_progress", in_progress),
    )


def _busy(samples: int) -> str:
    return " ".join(str(BUSY_IN_PROGRESS[i % len(BUSY_IN_PROGRESS)]) for i in range(samples))


def _idle_case(b: _Builder) -> BoundaryCase:
    idle_for = seconds(b.config.queue_idle_for)
    quiet_series = f"0x{SAMPLES}"
    # Nothing at all from the first sample on: fires once the type has been watched
    # for `idle_for` (its summary's "idle for"), never sooner.
    firing = Scenario(_idle_series(b, quiet_series, quiet_series), b.by_type, humanize(0))
    busy = Scenario(
        _idle_series(b, f"0+{BUSY_PER_MINUTE}x{SAMPLES}", _busy(SAMPLES + 1)), b.by_type
    )
    # Just over the threshold: one long job running, nothing else happening.
    one_running = Scenario(_idle_series(b, quiet_series, f"1x{SAMPLES}"), b.by_type)
    # Traffic, then none: silent while busy and until `idle_for` has passed since the
    # last busy sample (one second short of it, the range still holds that sample),
    # firing by `idle_for` after the first quiet sample (one sample of slack: Prometheus
    # 2 and 3 differ on whether a range includes its left edge). So the alert fires
    # `idle_for` after traffic stops, as its summary says.
    stop = IDLE_STOPS_AT
    fires_by = stop * 60 + idle_for
    after = fires_by // 60 - stop + 1
    last = BUSY_PER_MINUTE * (stop - 1)
    stopped = Scenario(
        _idle_series(
            b,
            f"0+{BUSY_PER_MINUTE}x{stop - 1} {last}x{after}",
            f"{_busy(stop)} 0x{after - 1}",
        ),
        b.by_type,
        humanize(0),
    )
    checks = ((stop * 60 - 60, False), ((stop - 1) * 60 + idle_for - 1, False), (fires_by, True))
    return BoundaryCase(idle_for, firing, (busy, one_running), (Timeline(stopped, checks),))


def _rate_case(
    key: str, threshold: float, for_field: str, labels: Callable[[_Builder], dict[str, str]]
) -> Callable[[_Builder], BoundaryCase]:
    """A counter whose rate must exceed `threshold`/s: increments per minute just above
    and just under (or at, when the threshold is 0) `threshold * 60`."""

    def build(b: _Builder) -> BoundaryCase:
        window = seconds(q.Selector.alerts(b.config.namespace, b.config.job).window) // 60
        per_minute = threshold * 60
        over = math.floor(per_minute) + 1
        under = max(0, math.ceil(per_minute) - 1)

        def rate_at(minute: int) -> float:
            # A counter starting at 0 is never extrapolated before its first sample, so
            # until the window is full the rate is the increase over the whole window.
            return over * min(minute, window) / (window * 60)

        onset = next(m for m in range(1, window + 1) if rate_at(m) > threshold)
        fires_at = onset + seconds(getattr(b.config, for_field)) // 60
        firing = Scenario(
            (b.series(key, f"0+{over}x{SAMPLES}"),), labels(b), humanize(rate_at(fires_at))
        )
        quiet = Scenario((b.series(key, f"0+{under}x{SAMPLES}"),), labels(b))
        return BoundaryCase(onset * 60, firing, (quiet,))

    return build


def _held_at_rate_limit_case(b: _Builder) -> BoundaryCase:
    """Starts held back (one a second) while the queue grows: fires `for` after both
    hold (rate and delta need two samples: a minute). Held back with a flat queue, or a
    growing queue nothing holds back, never fires."""

    def scenario(held_per_minute: int, depth: str) -> tuple[Series, ...]:
        return (
            b.series("held_back_rate", f"0+{held_per_minute}x{SAMPLES}"),
            b.series("queue_depth", depth),
        )

    firing = Scenario(scenario(60, f"0+5x{SAMPLES}"), b.by_type, humanize(1))
    quiet = (
        Scenario(scenario(60, f"40x{SAMPLES}"), b.by_type),
        Scenario(scenario(0, f"0+5x{SAMPLES}"), b.by_type),
    )
    return BoundaryCase(60, firing, quiet)


def _fair_key_starving_case(b: _Builder) -> BoundaryCase:
    """The oldest key's wait over both the ratio times the median key's and the floor.
    Quiet exactly at each edge: the oldest equal to ratio x median (the product is
    computed as PromQL does, in doubles), and equal to the floor."""
    ratio, floor = b.config.fair_key_starving_ratio, b.config.fair_key_starving_floor_seconds
    median = math.ceil((floor + 1) / ratio) + 1  # ratio x median is past the floor

    def scenario(oldest: float, median: float) -> tuple[Series, ...]:
        return (
            b.depth(1),
            b.series("fair_key_oldest_wait", f"{q.number(oldest)}x{SAMPLES}"),
            b.series("fair_key_median_wait", f"{q.number(median)}x{SAMPLES}"),
        )

    at_ratio = ratio * median
    firing = Scenario(scenario(at_ratio + 1, median), b.by_type, humanize_duration(at_ratio + 1))
    quiet = (
        Scenario(scenario(at_ratio, median), b.by_type),
        Scenario(scenario(floor, floor / (2 * ratio)), b.by_type),
    )
    return BoundaryCase(0, firing, quiet)


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
    depth_high, dead_high = config.queue_depth_high, config.dead_letter_high
    builders: dict[str, Callable[[_Builder], BoundaryCase]] = {
        "QueueDepthHigh": _gauge_case("queue_depth", depth_high + 1, depth_high),
        "QueueIdle": _idle_case,
        "JobLatencyP95AboveSLO": _latency_case,
        "DeadLetterDepthHigh": _gauge_case("dead_letter_depth", dead_high + 1, dead_high),
        "QueueExporterDown": _target_case(None, 0, 1),
        "QueueExporterAbsent": _absent_case,
        "QueueRedisUnreachable": _target_case("redis_up", 0, 1),
        "QueueNoActiveWorkers": _no_workers_case,
        "JobFailureRatioHigh": _failure_ratio_case,
        "OldestJobOlderThanTTL": _oldest_case,
        "QueueRedisEvictionPolicyUnsafe": _eviction_policy_case,
        "QueueRedisMemoryHigh": _redis_memory_case,
        "JobsExpiring": _rate_case(
            "expired", config.expired_rate_high, "expired_rate_high_for", lambda b: b.by_type
        ),
        "QueueExporterDroppingAgentTypes": _target_case("types_dropped", 1, 0),
        "QueueExporterMalformedValues": _rate_case(
            "malformed", 0, "malformed_values_for", lambda b: b.by_target
        ),
        "QueuePausedTooLong": _gauge_case("paused", 1, 0),
        "QueueHeldAtRateLimit": _held_at_rate_limit_case,
        "QueueFairKeyStarving": _fair_key_starving_case,
    }
    return {name: build(b) for name, build in builders.items()}
