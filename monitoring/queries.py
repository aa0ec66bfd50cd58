"""PromQL built from the metric catalogue, shared by the dashboards and the alert spec.

Every series comes from the exporter's catalogue through a `Selector` (but Prometheus'
own `up`). Exporter replicas are aggregated with `max`, never `sum`: every replica reads
the same Redis and reports the same totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from platform_common.jobs.metric_catalogue import (
    AGENT_TYPE,
    ERROR_CLASS,
    NODE,
    POLICY,
    WORKER,
    by_key,
)

__all__ = [
    "PROMETHEUS_UP",
    "Selector",
    "active_workers_idle",
    "failed_attempts_by_class",
    "failure_ratio",
    "gauge_by_type",
    "heartbeat_age",
    "idle_activity",
    "latency_heatmap",
    "latency_quantile",
    "number",
    "per_type_limit",
    "rate_by_type",
    "ratio_to_limit",
    "redis_by_node",
    "redis_memory_ratio",
    "redis_policy_safe",
    "redis_rate_by_node",
    "target_rate",
    "target_series",
    "worker_heartbeat_ages",
    "worker_jobs_in_progress",
]

PROMETHEUS_UP = "up"
"""Prometheus' synthetic per-target health series (not in the exporter's catalogue)."""

BY_TYPE = f"job, {AGENT_TYPE}"


@dataclass(frozen=True, slots=True)
class Selector:
    """How queries select series: dashboards use template variables, alerts fixed labels.

    `target_matchers` apply to every series (Prometheus gives all `job` and `instance`);
    `agent_type_matcher` only to metrics with `agent_type`, not to the exporter's own.
    """

    namespace: str
    target_matchers: tuple[str, ...]
    agent_type_matcher: str | None
    window: str

    @classmethod
    def dashboard(cls, namespace: str) -> Selector:
        return cls(
            namespace,
            ('job=~"$job"', 'instance=~"$instance"'),
            'agent_type=~"$agent_type"',
            "$__rate_interval",
        )

    @classmethod
    def alerts(cls, namespace: str, job: str, window: str = "5m") -> Selector:
        return cls(namespace, (f'job="{job}"',), None, window)

    def series(self, key: str, suffix: str = "") -> str:
        """`name{matchers}` of catalogue metric `key` (`suffix` e.g. "_bucket")."""
        metric = by_key(key)
        matchers = list(self.target_matchers)
        if self.agent_type_matcher and AGENT_TYPE in metric.labels:
            matchers.append(self.agent_type_matcher)
        return f"{metric.full_name(self.namespace)}{suffix}{{{', '.join(matchers)}}}"

    def rate(self, key: str, suffix: str = "", window: str | None = None) -> str:
        return f"rate({self.series(key, suffix)}[{window or self.window}])"


def gauge_by_type(sel: Selector, key: str) -> str:
    return f"max by ({BY_TYPE}) ({sel.series(key)})"


def rate_by_type(sel: Selector, key: str, window: str | None = None) -> str:
    return f"max by ({BY_TYPE}) ({sel.rate(key, window=window)})"


def latency_quantile(
    sel: Selector, quantile: float, window: str | None = None, key: str = "latency"
) -> str:
    """Quantile of duration histogram `key` (latency, wait or run) per agent type."""
    buckets = sel.rate(key, "_bucket", window)
    return f"histogram_quantile({quantile}, max by ({BY_TYPE}, le) ({buckets}))"


def failed_attempts_by_class(sel: Selector) -> str:
    """Failed attempts per second per agent type and exception class."""
    return f"max by ({BY_TYPE}, {ERROR_CLASS}) ({sel.rate('attempts_failed')})"


def worker_heartbeat_ages(sel: Selector) -> str:
    """Seconds since each worker's last heartbeat (the exporter caps the workers)."""
    return f"max by ({BY_TYPE}, {WORKER}) ({sel.series('worker_heartbeat_age')})"


def worker_jobs_in_progress(sel: Selector) -> str:
    """Jobs each worker is running, by its last heartbeat (the same workers as the ages)."""
    return f"max by ({BY_TYPE}, {WORKER}) ({sel.series('worker_jobs')})"


def latency_heatmap(sel: Selector) -> str:
    """Completions per second per latency bucket, all selected agent types together."""
    return f"sum by (le) (max by ({BY_TYPE}, le) ({sel.rate('latency', '_bucket')}))"


def failure_ratio(sel: Selector, window: str | None = None) -> str:
    """Terminal failures / (completions + terminal failures); NaN without traffic."""
    failed = rate_by_type(sel, "failed", window)
    completed = rate_by_type(sel, "completed", window)
    return f"{failed} / ({completed} + {failed})"


def heartbeat_age(sel: Selector) -> str:
    return f"time() - {gauge_by_type(sel, 'last_heartbeat')}"


def active_workers_idle(sel: Selector) -> str:
    """Queue depth of each agent type that has work waiting and no live worker."""
    # Parenthesised: `and` binds looser than the comparison the alert appends.
    waiting = gauge_by_type(sel, "queue_depth")
    idle = f"{gauge_by_type(sel, 'active_workers')} == 0"
    return f"({waiting} and on ({BY_TYPE}) ({idle}))"


def held_at_rate_limit(sel: Selector) -> str:
    """Per agent type, the job starts its rate limit holds back per second while its queue
    depth grew over the same window (held back with a flat queue, it keeps up)."""
    # Parenthesised: `and` binds looser than the comparison the alert appends.
    held = rate_by_type(sel, "held_back_rate")
    growing = f"max by ({BY_TYPE}) (delta({sel.series('queue_depth')}[{sel.window}])) > 0"
    return f"({held} and on ({BY_TYPE}) ({growing}))"


def fair_key_starving(sel: Selector, ratio: float) -> str:
    """Per agent type, the longest any fairness key with jobs waiting has gone without a
    start, where it is over `ratio` times the median key's: one key waits while the
    others take turns (the alert appends the floor)."""
    # Parenthesised: `and` binds looser than the comparison the alert appends.
    oldest = gauge_by_type(sel, "fair_key_oldest_wait")
    median = gauge_by_type(sel, "fair_key_median_wait")
    return f"({oldest} and on ({BY_TYPE}) ({oldest} > {number(ratio)} * {median}))"


def idle_activity(sel: Selector, idle_for: str) -> str:
    """Per agent type, what happened in the last `idle_for`: jobs enqueued and started,
    plus the most that waited, waited for a retry or ran at any scrape. 0 means idle for
    all of `idle_for`, so `< 1` needs no `for` to mean it, and fires `idle_for` after the
    last activity (a `for` on top of the range would add the two).

    Every term is a whole number of jobs when anything happened (`increase` only
    extrapolates outwards), so `< 1` is exactly "nothing at all" without an `==`.
    The counters catch jobs that came and went between two scrapes; the gauges catch
    a job running or waiting for the whole range. A type not yet scraped `idle_for` ago
    counts 1 more (not idle yet): one seen for a minute has not been idle for ten.
    """
    terms = [
        f"max by ({BY_TYPE}) (increase({sel.series(key)}[{idle_for}]))"
        for key in ("enqueued", "started")
    ] + [
        f"max by ({BY_TYPE}) (max_over_time({sel.series(key)}[{idle_for}]))"
        for key in ("queue_depth", "delayed_depth", "in_progress")
    ]
    depth = sel.series("queue_depth")
    # 0 for a type scraped `idle_for` ago, else (`or`: only types the left side lacks) 1.
    unwatched = (
        f"(max by ({BY_TYPE}) ({depth} offset {idle_for}) * 0"
        f" or max by ({BY_TYPE}) ({depth}) * 0 + 1)"
    )
    return f"(({' + '.join(terms)}) + on ({BY_TYPE}) {unwatched})"


def redis_policy_safe(sel: Selector) -> str:
    """1 per Redis primary whose maxmemory-policy is noeviction, 0 per one that can evict."""
    return f"max by (job, {NODE}, {POLICY}) ({sel.series('redis_policy_safe')})"


def redis_by_node(sel: Selector, key: str) -> str:
    """A per-node gauge of Redis' own (memory, clients), one series per primary."""
    return f"max by (job, {NODE}) ({sel.series(key)})"


def redis_rate_by_node(sel: Selector, key: str) -> str:
    """A per-node counter of Redis' own (evicted keys) as a per-second rate."""
    return f"max by (job, {NODE}) ({sel.rate(key)})"


def redis_memory_ratio(sel: Selector) -> str:
    """Used / maxmemory per Redis primary; no series for a node without a limit (0)."""
    used = f"max by (job, {NODE}) ({sel.series('redis_memory_used')})"
    limit = f"max by (job, {NODE}) ({sel.series('redis_memory_max')}) > 0"
    return f"{used} / ({limit})"


def target_rate(sel: Selector, key: str) -> str:
    """Per-second rate of the exporter's own counter `key`, per scrape target."""
    return sel.rate(key)


def target_series(sel: Selector, key: str | None = None) -> str:
    """A per-target series: catalogue metric `key`, or Prometheus' `up` when None."""
    if key is not None:
        return sel.series(key)
    return f"{PROMETHEUS_UP}{{{', '.join(sel.target_matchers)}}}"


def per_type_limit(sel: Selector, default: float, overrides: Mapping[str, float]) -> str:
    """One limit per agent type: the overrides, else `default` for every type seen (by
    its queue_depth gauge: no counter is used outside rate())."""
    default_side = f"group by ({AGENT_TYPE}) ({sel.series('queue_depth')}) * {number(default)}"
    parts = [
        f'label_replace(vector({number(limit)}), "{AGENT_TYPE}", "{agent_type}", "", "")'
        for agent_type, limit in sorted(overrides.items())
    ]
    return "(" + " or ".join([*parts, default_side]) + ")"


def ratio_to_limit(
    sel: Selector, value: str, default: float, overrides: Mapping[str, float]
) -> str:
    """`value` (by job, agent_type) divided by its agent type's limit: > 1 means over."""
    if not overrides:
        return f"({value}) / {number(default)}"
    limit = per_type_limit(sel, default, overrides)
    return f"({value}) / on ({AGENT_TYPE}) group_left () {limit}"


def number(value: float) -> str:
    """A PromQL number literal without a spurious `.0`."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
