"""The alert spec: every alert declared once; Grafana, Prometheus and runbooks derive from it.

An alert is `query <op> threshold` held for `for_`. `query` is Grafana's query A (then
B = reduce last, C = threshold), and `expr` the Prometheus rule's expression, so both
systems compare the same number with the same threshold. `op` is `gt` or `lt` only (why:
docs/monitoring.md, "Grafana 10.4 or newer").
`summary` and `description` are `string.Template`s over `$agent_type`, `$instance`,
`$job`, `$node`, `$policy`, `$value`, `$threshold` and `$for_`, rendered into each
system's own templating by `render_text`, so a text can never state another threshold
or duration than the rule's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from string import Template
from typing import Literal

from platform_common.jobs.dashboard_ids import QUEUE_OVERVIEW_UID, QueueOverviewPanel
from platform_common.jobs.errors import ConfigurationError

from . import queries as q
from .config import MonitoringConfig
from .slo import SLO_KINDS, BurnRatePair, Objective, SloKind, window_seconds
from .slo_queries import SloQueries, burn_alert, pairs_of

__all__ = ["AlertSpec", "Op", "TemplateFlavour", "alert_specs", "render_concrete", "render_text"]

Op = Literal["gt", "lt"]
PROMQL_OP: dict[Op, str] = {"gt": ">", "lt": "<"}
Severity = Literal["critical", "warning", "info"]
ValueFormat = Literal["humanize", "humanizePercentage", "humanizeDuration"]
TemplateFlavour = Literal["prometheus", "grafana", "runbook"]


@dataclass(frozen=True, slots=True)
class AlertSpec:
    """One alert. The runbook page and the alert name are the same identifier."""

    name: str
    """alertname, Grafana rule title and runbook page name."""
    query: str
    """PromQL whose value is compared with `threshold` (Grafana's query A)."""
    op: Op
    threshold: float
    for_: str
    severity: Severity
    action: str
    """Label telling the responder (or an autoscaler) what to do: scale-up, ..."""
    summary: str
    description: str
    panel: QueueOverviewPanel
    value_format: ValueFormat = "humanize"
    no_data_state: Literal["OK", "NoData", "Alerting"] = "OK"
    """Grafana's state when A returns nothing. OK by default: a silent exporter is
    what QueueExporterDown / QueueExporterAbsent page for, once, not every rule."""
    expect_data: bool = True
    """Whether `query` returns series on a healthy, busy system (checked live)."""
    unit: str = "short"
    """Grafana unit of `query`'s value (the alert row's stat panel shows it)."""
    dashboard_uid: str = QUEUE_OVERVIEW_UID
    rule_query: str | None = None
    """The Prometheus rule's query when it differs from Grafana's `query`: the SLO alerts
    read the recording rules, which Grafana (and the dashboard) cannot count on."""
    slo: SloKind | None = None
    """The SLO a burn-rate alert is about (its `slo` label); None for a threshold alert."""

    @property
    def about_agent_type(self) -> bool:
        """Whether the alert fires per agent type (its texts name `$agent_type`): such
        an alert carries the `agent_type` label and links its console page."""
        return "$agent_type" in self.summary

    @property
    def runbook_slug(self) -> str:
        return self.name

    @property
    def expr(self) -> str:
        """The Prometheus rule expression: the same query (or its recorded form) and threshold."""
        return f"{self.query if self.rule_query is None else self.rule_query} {self.condition}"

    @property
    def condition(self) -> str:
        """Human form of the comparison, e.g. '> 100'."""
        return f"{PROMQL_OP[self.op]} {q.number(self.threshold)}"

    def labels(self) -> dict[str, str]:
        slo = {} if self.slo is None else {"slo": self.slo}
        return {"action": self.action, "severity": self.severity, **slo}


_LABELS = ("agent_type", "instance", "job", "node", "policy")
"""The labels an alert text may name."""

_LABEL_TEMPLATE = {
    "prometheus": "{{ $labels.%s }}",
    "grafana": "{{ $labels.%s }}",
    "runbook": "`<%s>`",  # code span: markdown would swallow a bare <tag>
}
_VALUE_TEMPLATE = {
    "prometheus": "{{ $value | %s }}",
    "grafana": "{{ $values.B.Value | %s }}",
    "runbook": "`<value>`",
}


def render_text(template: str, spec: AlertSpec, flavour: TemplateFlavour) -> str:
    """Fill `$agent_type`, `$instance`, `$job`, `$node`, `$policy`, `$value` for
    Prometheus, Grafana or a page."""
    label = _LABEL_TEMPLATE[flavour]
    value = _VALUE_TEMPLATE[flavour]
    return Template(template).substitute(
        threshold=q.number(spec.threshold),
        for_=spec.for_,
        **{name: label % name for name in _LABELS},
        value=value % spec.value_format if flavour != "runbook" else value,
    )


def render_concrete(template: str, spec: AlertSpec, labels: dict[str, str], value_text: str) -> str:
    """The text Prometheus produces for these labels and this (humanized) value."""
    return Template(template).substitute(
        threshold=q.number(spec.threshold),
        for_=spec.for_,
        **{name: labels.get(name, "") for name in _LABELS},
        value=value_text,
    )


def _seconds(value: float) -> str:
    return f"{q.number(value)}s"


def alert_specs(
    config: MonitoringConfig, selector: q.Selector | None = None
) -> tuple[AlertSpec, ...]:
    """Every alert, in page order; `config.for_override` shortens every `for` (tests).

    `selector` swaps the alerts' fixed `job` selector and window for another one: the
    dashboard's alert row shows each alert's own query under the template variables.
    """
    sel = selector or q.Selector.alerts(config.namespace, config.job)
    panel = QueueOverviewPanel
    slo = config.default_latency_slo
    ttl = config.job_ttl_seconds
    specs = (
        AlertSpec(
            name="QueueDepthHigh",
            query=q.gauge_by_type(sel, "queue_depth"),
            op="gt",
            threshold=config.queue_depth_high,
            for_=config.queue_depth_high_for,
            severity="warning",
            action="scale-up",
            panel=panel.QUEUE_DEPTH,
            summary="Queue $agent_type has $value jobs waiting (threshold $threshold).",
            description=(
                "More than $threshold jobs have waited in the $agent_type queue for $for_: "
                "workers are not keeping up. Scale the $agent_type worker pool up."
            ),
        ),
        AlertSpec(
            # The idle time is the query's range, not a `for`: it fires queue_idle_for
            # after the last activity, which is what its texts say.
            name="QueueIdle",
            query=q.idle_activity(sel, config.queue_idle_for),
            op="lt",
            threshold=1,
            for_="0s",
            severity="info",
            action="scale-down",
            panel=panel.THROUGHPUT,
            summary=(
                f"Queue $agent_type has been idle for {config.queue_idle_for}: "
                "nothing enqueued or running."
            ),
            description=(
                f"No $agent_type job was enqueued or started, and none waited, waited for "
                f"a retry or ran, in the last {config.queue_idle_for}: traffic has stopped. "
                "The worker pool can be scaled down."
            ),
        ),
        AlertSpec(
            name="JobLatencyP95AboveSLO",
            query=q.ratio_to_limit(sel, q.latency_quantile(sel, 0.95), slo, config.latency_slos()),
            op="gt",
            threshold=1,
            for_=config.latency_above_slo_for,
            severity="warning",
            action="investigate-workers",
            panel=panel.LATENCY_QUANTILES,
            summary="p95 latency of $agent_type jobs is $value of its SLO.",
            description=(
                f"The 95th percentile of enqueue-to-completion latency ({sel.window} window) of "
                f"$agent_type jobs is above its SLO (default {_seconds(slo)} = "
                f"{q.number(config.latency_slo_fraction_of_ttl)} x the {_seconds(ttl)} job TTL) "
                "for $for_. Check worker saturation, slow handlers and retries."
            ),
            value_format="humanizePercentage",
            unit="percentunit",
        ),
        AlertSpec(
            name="DeadLetterDepthHigh",
            query=q.gauge_by_type(sel, "dead_letter_depth"),
            op="gt",
            threshold=config.dead_letter_high,
            for_=config.dead_letter_high_for,
            severity="warning",
            action="investigate-failures",
            panel=panel.DEAD_LETTER_DEPTH,
            summary="$value $agent_type jobs are dead-lettered (threshold $threshold).",
            description=(
                "The $agent_type dead-letter list holds more than $threshold jobs that used "
                "all their attempts: a systemic failure (bad deploy, broken "
                "dependency, poison payloads). Find the cause, then requeue or purge."
            ),
        ),
        AlertSpec(
            name="QueueExporterDown",
            query=q.target_series(sel),
            op="lt",
            threshold=1,
            for_=config.exporter_down_for,
            severity="critical",
            action="restore-exporter",
            panel=panel.EXPORTER_UP,
            summary="Queue exporter $instance is down.",
            description=(
                "Prometheus cannot scrape the queue exporter at $instance for $for_: queue "
                "metrics, autoscaling signals and every other queue alert are blind."
            ),
        ),
        AlertSpec(
            name="QueueExporterAbsent",
            query=f"absent({q.target_series(sel)})",
            op="gt",
            threshold=0,
            for_=config.exporter_absent_for,
            severity="critical",
            action="restore-exporter",
            panel=panel.EXPORTER_UP,
            summary=f"No queue exporter target (job={config.job}) in Prometheus.",
            description=(
                f"Prometheus has no target of job {config.job} for $for_: the exporter is not "
                "deployed or service discovery lost it. Every queue alert is blind."
            ),
            expect_data=False,
        ),
        AlertSpec(
            name="QueueRedisUnreachable",
            query=q.target_series(sel, "redis_up"),
            op="lt",
            threshold=1,
            for_=config.redis_unreachable_for,
            severity="critical",
            action="restore-redis",
            panel=panel.EXPORTER_UP,
            summary="Queue exporter $instance cannot read Redis.",
            description=(
                "The exporter at $instance answers but its last scrapes could not read Redis "
                "for $for_. Producers and workers using the same Redis are probably failing too."
            ),
        ),
        AlertSpec(
            name="QueueNoActiveWorkers",
            query=q.active_workers_idle(sel),
            op="gt",
            threshold=0,
            for_=config.no_active_workers_for,
            severity="critical",
            action="start-workers",
            panel=panel.ACTIVE_WORKERS,
            summary="$value $agent_type jobs are waiting and no worker is alive.",
            description=(
                "Jobs wait in the $agent_type queue and no $agent_type worker has sent a "
                "heartbeat for $for_: nothing will process them. Start or fix the workers."
            ),
            expect_data=False,
        ),
        AlertSpec(
            name="JobFailureRatioHigh",
            query=q.failure_ratio(sel),
            op="gt",
            threshold=config.failure_ratio_high,
            for_=config.failure_ratio_high_for,
            severity="warning",
            action="investigate-failures",
            panel=panel.FAILURE_RATIO,
            summary="$value of $agent_type jobs fail for good.",
            description=(
                "The share of finished $agent_type jobs that failed after their last attempt "
                f"({sel.window} window) has been above $threshold (1 = 100%) for $for_."
            ),
            value_format="humanizePercentage",
            unit="percentunit",
        ),
        AlertSpec(
            name="OldestJobOlderThanTTL",
            query=q.ratio_to_limit(sel, q.gauge_by_type(sel, "oldest_age"), ttl, config.job_ttls()),
            op="gt",
            threshold=1,
            for_=config.oldest_job_over_ttl_for,
            severity="warning",
            action="scale-up",
            panel=panel.OLDEST_JOB_AGE,
            summary="The oldest waiting $agent_type job is at $value of its TTL.",
            description=(
                "The oldest job in the $agent_type queue has waited longer than the job TTL "
                f"(default {_seconds(ttl)}) for $for_: jobs expire before any worker takes them."
            ),
            value_format="humanizePercentage",
            unit="percentunit",
        ),
        AlertSpec(
            name="QueueRedisEvictionPolicyUnsafe",
            query=q.redis_policy_safe(sel),
            op="lt",
            threshold=1,
            for_=config.redis_eviction_policy_unsafe_for,
            severity="warning",
            action="fix-redis-config",
            panel=panel.REDIS_EVICTION_POLICY,
            summary="Redis $node has maxmemory-policy $policy: it can evict queue data.",
            description=(
                "Redis $node runs with maxmemory-policy $policy, not noeviction: when its "
                "memory fills it deletes keys, silently losing queued jobs, results and the "
                "counters. Set maxmemory-policy noeviction."
            ),
        ),
        AlertSpec(
            name="QueueRedisMemoryHigh",
            query=q.redis_memory_ratio(sel),
            op="gt",
            threshold=config.redis_memory_high,
            for_=config.redis_memory_high_for,
            severity="warning",
            action="free-redis-memory",
            panel=panel.REDIS_MEMORY,
            summary="Redis $node uses $value of its maxmemory.",
            description=(
                "Redis $node has used more than $threshold of its maxmemory (1 = 100%) for "
                "$for_. At the limit, under noeviction, every enqueue and every worker write "
                "is refused (OOM) until memory is freed."
            ),
            value_format="humanizePercentage",
            expect_data=False,
            unit="percentunit",
        ),
        AlertSpec(
            name="JobsExpiring",
            query=q.rate_by_type(sel, "expired"),
            op="gt",
            threshold=config.expired_rate_high,
            for_=config.expired_rate_high_for,
            severity="warning",
            action="investigate-workers",
            panel=panel.RETRIES,
            summary="$value $agent_type jobs/s expire before they complete.",
            description=(
                f"$agent_type jobs have been dropped because their TTL passed ({sel.window} "
                "rate above $threshold jobs/s) for $for_: each one is a request whose user "
                "gets an expired result. Workers do not take or finish them in time."
            ),
            unit="ops",
        ),
        AlertSpec(
            name="QueueExporterDroppingAgentTypes",
            query=q.target_series(sel, "types_dropped"),
            op="gt",
            threshold=0,
            for_=config.agent_types_dropped_for,
            severity="warning",
            action="raise-type-cap",
            panel=panel.EXPORTER_ERRORS,
            summary="Queue exporter $instance leaves $value agent types out (type cap reached).",
            description=(
                "The exporter at $instance has found more agent types than its cap "
                "(EXPORTER_MAX_AGENT_TYPES) for $for_: the types over it have no metrics, "
                "so none of their alerts can fire. Raise the cap or remove stale types."
            ),
        ),
        AlertSpec(
            name="QueueExporterMalformedValues",
            query=q.target_rate(sel, "malformed"),
            op="gt",
            threshold=0,
            for_=config.malformed_values_for,
            severity="warning",
            action="repair-redis-data",
            panel=panel.EXPORTER_ERRORS,
            summary="Queue exporter $instance skips $value unparseable Redis values per second.",
            description=(
                "The exporter at $instance has kept finding values in Redis it cannot "
                "parse (a key of the wrong type, a counter that is not a number) for $for_: "
                "the metrics they feed are missing, not zero, and their alerts are blind."
            ),
            unit="ops",
        ),
        AlertSpec(
            name="QueuePausedTooLong",
            query=q.gauge_by_type(sel, "paused"),
            op="gt",
            threshold=0,
            for_=config.queue_paused_too_long_for,
            severity="warning",
            action="resume-queue",
            panel=panel.QUEUE_DEPTH,
            summary="Agent type $agent_type has been paused for $for_: its jobs wait.",
            description=(
                "Workers have started no $agent_type job for $for_ because the type is "
                "paused (agentjobs pause). Jobs still enqueue and wait, and expire when their "
                "TTL passes. Resume it (agentjobs resume) once the reason for the pause is gone."
            ),
        ),
        AlertSpec(
            name="QueueHeldAtRateLimit",
            query=q.held_at_rate_limit(sel),
            op="gt",
            threshold=0,
            for_=config.held_at_rate_limit_for,
            severity="warning",
            action="raise-rate-limit",
            panel=panel.LIMITS_STARTS,
            summary=(
                "Agent type $agent_type has been held at its rate limit for $for_ while its "
                "queue grew: $value starts/s held back."
            ),
            description=(
                "The rate limit of $agent_type (agentjobs limits set --rate) has held job "
                "starts back for $for_ while its queue depth kept growing: it admits fewer "
                "jobs than producers send, so waiting jobs age and expire when their TTL "
                "passes. Raise the rate if the upstream it protects allows, else slow the "
                "producers."
            ),
            expect_data=False,
            unit="ops",
        ),
        AlertSpec(
            name="QueueFairKeyStarving",
            query=q.fair_key_starving(sel, config.fair_key_starving_ratio),
            op="gt",
            threshold=config.fair_key_starving_floor_seconds,
            for_=config.fair_key_starving_for,
            severity="warning",
            action="unblock-fair-key",
            panel=panel.FAIR_KEY_WAIT,
            summary=(
                "A fairness key of agent type $agent_type has waited $value without a "
                f"start, over {q.number(config.fair_key_starving_ratio)} times the median "
                "key's, for $for_."
            ),
            description=(
                "Fair share (agentjobs limits set --fair-by) gives each key of $agent_type "
                "a turn, yet one key with jobs waiting has gone far longer without a start "
                "than the median key for $for_: that key is held back (at its "
                "max_running_per_key, a rate limit, every worker busy with other keys, or a "
                "ring edited by hand). Its jobs age and expire when their TTL passes."
            ),
            value_format="humanizeDuration",
            expect_data=False,
            unit="s",
        ),
    )
    generated = _switched_off(config, (*specs, *_slo_specs(config, sel)))
    if config.for_override is None:
        return generated
    return tuple(replace(spec, for_=config.for_override) for spec in generated)


def _switched_off(config: MonitoringConfig, specs: tuple[AlertSpec, ...]) -> tuple[AlertSpec, ...]:
    """`specs` without the site's `alerts_off` (each must name an alert)."""
    names = [spec.name for spec in specs]
    for name in config.alerts_off:
        if name not in names:
            raise ConfigurationError("alerts_off", f"no alert is named {name!r}")
    return tuple(spec for spec in specs if spec.name not in config.alerts_off)


# -- burn-rate alerts of the SLOs (slo.py) ---------------------------------------------

_SLO_ALERTS: dict[SloKind, tuple[str, str, QueueOverviewPanel]] = {
    "availability": (
        "investigate-failures",
        "Of the finished $agent_type jobs, the share that failed for good (dead-lettered "
        "ones included) or expired",
        QueueOverviewPanel.SLO_AVAILABILITY_BURN,
    ),
    "latency": (
        "investigate-workers",
        "Of the completed $agent_type jobs, the share slower than the latency threshold "
        "(default {threshold}s from enqueue to completion)",
        QueueOverviewPanel.SLO_LATENCY_BURN,
    ),
}


def _percent(value: float) -> str:
    return f"{float(f'{value * 100:.2g}'):g}%"


def _pairs_text(pairs: tuple[BurnRatePair, ...], objective: Objective) -> str:
    """'14.4 times its error budget over both the last 1h and 5m (2.1% of a 28d budget
    spent in 1h), or 6 times over both 6h and 30m (5.4% in 6h)'."""
    parts = []
    for index, pair in enumerate(pairs):
        spent = pair.factor * window_seconds(pair.long) / window_seconds(objective.window)
        if index == 0:
            parts.append(
                f"{q.number(pair.factor)} times its error budget over both the last "
                f"{pair.long} and {pair.short} ({_percent(spent)} of a {objective.window} "
                f"budget spent in {pair.long})"
            )
        else:
            parts.append(
                f"{q.number(pair.factor)} times over both {pair.long} and {pair.short} "
                f"({_percent(spent)} in {pair.long})"
            )
    return ", or ".join(parts)


def _slo_specs(config: MonitoringConfig, sel: q.Selector) -> tuple[AlertSpec, ...]:
    """Per SLO, the workbook's page (fast burn) and ticket (slow burn) alerts. Grafana
    and the dashboard compute the burn rates inline; Prometheus reads the recordings."""
    rules = q.Selector.alerts(config.namespace, config.job)
    specs = []
    for kind in SLO_KINDS:
        action, errors, panel = _SLO_ALERTS[kind]
        objective = config.slo_default(kind)
        inline, recorded = SloQueries(config, kind, sel), SloQueries(config, kind, rules)
        budget = (
            f"The error budget is 1 - the objective (default {q.number(objective.target)}: "
            f"{_percent(objective.error_budget)} of the jobs in {objective.window})."
        )
        errors = errors.format(threshold=q.number(objective.threshold_seconds or 0))
        for severity, speed in (("page", "Fast"), ("ticket", "Slow")):
            pairs = pairs_of(severity)
            if severity == "page":
                days = window_seconds(objective.window) / pairs[0].factor / 86400
                consequence = (
                    f"At {q.number(pairs[0].factor)}x a {objective.window} budget is gone in "
                    f"{days:.1f} days: act now."
                )
            else:
                consequence = (
                    "At 1x the budget lasts exactly the window; faster, it runs out before "
                    "the window ends. Not urgent, but it will not stop by itself."
                )
            # As alert_specs' table; no `for`: the short window is what ends it (the
            # workbook's choice).
            specs.append(
                AlertSpec(
                    name=f"Job{kind.title()}BudgetBurn{speed}",
                    slo=kind,
                    query=burn_alert(inline.burn_rate, pairs),
                    rule_query=burn_alert(recorded.recorded_burn_rate, pairs),
                    op="gt",
                    threshold=0,
                    for_="0s",
                    severity="critical" if severity == "page" else "warning",
                    action=action,
                    panel=panel,
                    summary=(
                        f"$agent_type burns its {kind} error budget $value times as fast "
                        "as its SLO allows."
                    ),
                    description=(
                        f"{errors} has been more than {_pairs_text(pairs, objective)}. "
                        f"{budget} $value is the burn rate over the short window. {consequence}"
                    ),
                    expect_data=False,
                )
            )
    return tuple(specs)
