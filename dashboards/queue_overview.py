"""The queue overview dashboard: depth, throughput, latency, workers, exporter health, alerts.

Every query comes from the base package's `queries` (hence from the metric catalogue); the top row
shows each alert's own query and threshold, linked to its runbook, so the dashboard
and the alerts cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attr
from grafanalib.core import Annotations, Dashboard, GridPos, Template, Templating, Time

from platform_common.jobs.dashboard_ids import (
    PANEL_TITLES,
    QUEUE_OVERVIEW_TITLE,
    QUEUE_OVERVIEW_UID,
)
from platform_common.jobs.dashboard_ids import QueueOverviewPanel as P
from platform_common.jobs.keys import MAX_ERROR_CLASSES, OTHER_ERROR_CLASS
from platform_common.jobs.metric_catalogue import FAIR_BY, FAIR_KEY, MAX_WORKERS_PER_TYPE, by_key
from platform_common.jobs_monitoring import queries as q
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.slo import BURN_RATE_PAIRS, SloKind
from platform_common.jobs_monitoring.slo_queries import SloQueries
from platform_common.jobs_monitoring.spec import AlertSpec, alert_specs, render_text

from .panels import DATASOURCE, heatmap, link, row, stat, steps, timeseries

__all__ = ["SCHEMA_VERSION", "TAGS", "queue_overview"]

SCHEMA_VERSION = 39
TAGS = ["platform-common-jobs", "queue", "redis"]
_SEVERITY_COLOUR = {"critical": "red", "warning": "orange", "info": "blue"}
Placed = tuple[Any, int, int]


def _variables(config: MonitoringConfig) -> Templating:
    health = by_key("redis_up").full_name(config.namespace)
    depth = by_key("queue_depth").full_name(config.namespace)

    def query_variable(name: str, query: str) -> Template:
        return Template(
            name=name,
            label=name,
            query=query,
            dataSource=DATASOURCE,
            default="$__all",
            includeAll=True,
            multi=True,
            allValue=".+",
            refresh=2,  # on time range change: new targets and agent types appear
        )

    return Templating(
        list=[
            Template(
                name="datasource",
                label="Data source",
                query="prometheus",
                type="datasource",
                default=config.datasource_uid,  # the provisioned datasource's fixed uid
            ),
            query_variable("job", f"label_values({health}, job)"),
            query_variable("instance", f'label_values({health}{{job=~"$job"}}, instance)'),
            query_variable(
                "agent_type",
                f'label_values({depth}{{job=~"$job", instance=~"$instance"}}, agent_type)',
            ),
        ]
    )


def _alert_steps(spec: AlertSpec) -> list[dict[str, Any]]:
    """Colour a stat the way its alert judges the value."""
    bad = _SEVERITY_COLOUR[spec.severity]
    if spec.op == "gt":
        return steps((None, "green"), (spec.threshold, bad))
    return steps((None, bad), (spec.threshold, "green"))


def _alert_row(config: MonitoringConfig) -> list[Placed]:
    # The alerts' own queries under the dashboard's variables (and $__rate_interval).
    on_dashboard = alert_specs(config, q.Selector.dashboard(config.namespace))
    placed: list[Placed] = []
    for index, (spec, shown) in enumerate(zip(alert_specs(config), on_dashboard, strict=True)):
        description = (
            f"{render_text(spec.description, spec, 'runbook')}\n\n"
            f"Alert {spec.name} ({spec.severity}) fires when this is {spec.condition} "
            f"for {spec.for_}."
        )
        panel = stat(
            int(P.ALERT_STATS) + index,
            spec.name,
            description,
            spec.unit,
            [(shown.query, "{{agent_type}}{{instance}}")],
            _alert_steps(spec),
            # Empty is the healthy answer of alerts like absent(): say so.
            no_value="No data" if spec.expect_data else "OK",
            links=[
                link(f"Runbook: {spec.name}", config.runbook_url(spec.runbook_slug)),
                link("Panel", config.dashboard_path(spec.dashboard_uid, spec.panel)),
            ],
        )
        placed.append((panel, 4, 4))
    return placed


def _by_type(expr: str, suffix: str = "") -> tuple[str, str]:
    return expr, "{{agent_type}}" + suffix


def _chart(
    panel: P,
    description: str,
    unit: str,
    queries: Sequence[tuple[str, str]],
    size: tuple[int, int] = (12, 8),
    **options: Any,
) -> Placed:
    """The time series `panel`, titled from PANEL_TITLES, placed `size` (width, height):
    half a row wide unless it says otherwise."""
    return timeseries(panel, PANEL_TITLES[panel], description, unit, queries, **options), *size


def _queue_row(config: MonitoringConfig, sel: q.Selector) -> list[Placed]:
    ttl_line = steps((None, "green"), (config.job_ttl_seconds, "red"))
    return [
        _chart(
            P.QUEUE_DEPTH,
            "Jobs waiting in each agent type's queue (LLEN): the primary autoscaling "
            "signal, and its breakdown by priority level (high, normal, low) for a type "
            "that uses levels. Dashed line: QueueDepthHigh threshold "
            f"({config.queue_depth_high}).",
            by_key("queue_depth").unit,
            [
                _by_type(q.gauge_by_type(sel, "queue_depth")),
                (
                    f"max by ({q.BY_TYPE}, priority) ({sel.series('depth_by_priority')})",
                    "{{agent_type}} {{priority}}",
                ),
            ],
            threshold_steps=steps((None, "green"), (config.queue_depth_high, "orange")),
        ),
        _chart(
            P.DEAD_LETTER_DEPTH,
            "Jobs that used their last attempt, per agent type. Dashed line: "
            f"DeadLetterDepthHigh threshold ({config.dead_letter_high}).",
            by_key("dead_letter_depth").unit,
            [_by_type(q.gauge_by_type(sel, "dead_letter_depth"))],
            threshold_steps=steps((None, "green"), (config.dead_letter_high, "orange")),
        ),
        _chart(
            P.IN_FLIGHT,
            "Jobs held by a worker (leased) and jobs in the delayed set waiting for "
            "their retry backoff.",
            by_key("in_progress").unit,
            [
                _by_type(q.gauge_by_type(sel, "in_progress"), " in progress"),
                _by_type(q.gauge_by_type(sel, "delayed_depth"), " delayed"),
            ],
        ),
        _chart(
            P.OLDEST_JOB_AGE,
            "Age of the oldest job still in the queue (0 when empty). Dashed line: the "
            f"default job TTL ({q.number(config.job_ttl_seconds)}s); past it jobs expire.",
            by_key("oldest_age").unit,
            [_by_type(q.gauge_by_type(sel, "oldest_age"))],
            threshold_steps=ttl_line,
        ),
    ]


def _throughput_row(sel: q.Selector) -> list[Placed]:
    def rates(*keys: str) -> list[tuple[str, str]]:
        return [_by_type(q.rate_by_type(sel, key), f" {key}") for key in keys]

    return [
        _chart(
            P.THROUGHPUT,
            "Jobs per second per agent type. Completed is the workers' throughput; "
            "failed counts jobs that failed for good.",
            "ops",
            rates("enqueued", "started", "completed", "failed"),
        ),
        _chart(
            P.RETRIES,
            "Failed attempts scheduled for a retry, jobs moved to the dead-letter list, "
            "jobs dropped because their TTL passed and jobs cancelled on request, per "
            "second.",
            "ops",
            rates("retried", "dead_lettered", "expired", "cancelled"),
        ),
        _chart(
            P.FAILURE_RATIO,
            "Share of finished jobs that failed for good: failed / (completed + failed).",
            "percentunit",
            [_by_type(q.failure_ratio(sel))],
        ),
        _chart(
            P.FAILURES_BY_CLASS,
            "Attempts per second that ended in an error (retried, dead-lettered or "
            "failed for good), by the exception's class. LeaseExpired: the worker "
            "stopped renewing (crashed or killed); CorruptJob: the stored job does not "
            f"parse. The first {MAX_ERROR_CLASSES} classes of an agent type have a "
            f"series of their own, later ones count as `{OTHER_ERROR_CLASS}`.",
            "ops",
            [(q.failed_attempts_by_class(sel), "{{agent_type}} {{error_class}}")],
        ),
    ]


# Where to go from a slow job on the latency panels: its trace and its worker's log lines.
TRACES_HINT = (
    " Exemplars (the dots) are recent jobs of a bucket: each carries its trace_id, a link"
    " to the trace when the site sets trace_url. Any job's trace: search the tracing"
    " backend for messaging.message.id = <job id> (spans named send/process <agent"
    " type>); worker log lines about the job carry its trace_id and span_id."
)


def _latency_row(config: MonitoringConfig, sel: q.Selector) -> list[Placed]:
    unit = by_key("latency").unit
    quantiles = [
        _by_type(q.latency_quantile(sel, quantile), f" p{round(quantile * 100)}")
        for quantile in (0.5, 0.95, 0.99)
    ]
    slo = q.per_type_limit(sel, config.default_latency_slo, config.latency_slos())
    return [
        (
            heatmap(
                P.LATENCY_HEATMAP,
                PANEL_TITLES[P.LATENCY_HEATMAP],
                "Enqueue-to-completion latency: completions per second in each histogram "
                "bucket, selected agent types together." + TRACES_HINT,
                unit,
                "ops",
                q.latency_heatmap(sel),
            ),
            12,
            9,
        ),
        _chart(
            P.LATENCY_QUANTILES,
            "Quantiles of enqueue-to-completion latency per agent type, and each "
            "type's p95 SLO (JobLatencyP95AboveSLO fires when p95 stays above it)." + TRACES_HINT,
            unit,
            [*quantiles, _by_type(slo, " p95 SLO")],
            size=(12, 9),
            exemplars=True,
        ),
        _chart(
            P.WAIT_AND_RUN,
            "Where a job's time goes, per agent type, for jobs that succeeded. Wait: "
            "from its becoming due (enqueued, or its retry's due time) to the start "
            "of the attempt that succeeded; high means too few workers. Run: that "
            "attempt in the handler; high means slow work or a slow dependency. "
            "Latency also includes earlier failed attempts and their backoff." + TRACES_HINT,
            unit,
            [
                _by_type(q.latency_quantile(sel, quantile, key=key), f" {key} p{percent}")
                for key in ("wait", "run")
                for quantile, percent in ((0.5, 50), (0.95, 95))
            ],
            size=(24, 8),
            exemplars=True,
        ),
    ]


def _workers_row(sel: q.Selector) -> list[Placed]:
    return [
        _chart(
            P.ACTIVE_WORKERS,
            "Workers whose heartbeat is recent, per agent type.",
            by_key("active_workers").unit,
            [_by_type(q.gauge_by_type(sel, "active_workers"))],
        ),
        _chart(
            P.HEARTBEAT_AGE,
            "Seconds since any worker of the agent type last sent a heartbeat.",
            "s",
            [_by_type(q.heartbeat_age(sel))],
        ),
        _chart(
            P.WORKER_HEARTBEATS,
            "Seconds since each worker's last heartbeat (at most "
            f"{MAX_WORKERS_PER_TYPE} per agent type, the stalest). A worker whose line "
            "keeps climbing has stopped: its jobs in progress return to the queue when "
            "their leases lapse (In progress panel above).",
            by_key("worker_heartbeat_age").unit,
            [(q.worker_heartbeat_ages(sel), "{{agent_type}} {{worker}}")],
        ),
        _chart(
            P.WORKER_JOBS,
            "Jobs each worker is running, as its last heartbeat reported (the same "
            f"workers as {PANEL_TITLES[P.WORKER_HEARTBEATS]}). A worker whose heartbeat "
            "age climbs while it still shows jobs holds them until their leases lapse; "
            "one at 0 while the queue grows takes no work.",
            by_key("worker_jobs").unit,
            [(q.worker_jobs_in_progress(sel), "{{agent_type}} {{worker}}")],
        ),
    ]


def _limits_row(sel: q.Selector) -> list[Placed]:
    """An agent type's limits (agentjobs limits set) beside what they bound: a type whose
    starts sit on its rate line while its queue grows is held at its rate."""
    return [
        _chart(
            P.LIMITS_STARTS,
            "Job starts per second per agent type, its rate limit (no line: no limit) "
            "and the starts it held back per second (claims that asked for more than "
            "the rate allowed). Starts on the limit while the queue depth grows: the "
            "type is held at its rate; raise it (agentjobs limits set TYPE --rate ...) "
            "if the upstream it protects allows.",
            "short",
            [
                _by_type(q.rate_by_type(sel, "started"), " starts/s"),
                _by_type(q.gauge_by_type(sel, "rate_limit"), " rate limit"),
                _by_type(q.rate_by_type(sel, "held_back_rate"), " held back/s"),
            ],
        ),
        _chart(
            P.LIMITS_RUNNING,
            "Jobs in progress per agent type, its max_running (no line: no cap) and the "
            "starts the cap held back per second. Workers start no job of a type at "
            "its cap until one ends.",
            by_key("in_progress").unit,
            [
                _by_type(q.gauge_by_type(sel, "in_progress"), " running"),
                _by_type(q.gauge_by_type(sel, "max_running_limit"), " max_running"),
                _by_type(q.rate_by_type(sel, "held_back_max_running"), " held back/s"),
            ],
        ),
        *_fair_share_panels(sel),
    ]


def _fair_share_panels(sel: q.Selector) -> list[Placed]:
    """Fair share (agentjobs limits set --fair-by): how many keys wait, whether one of
    them waits far longer than the rest, and what max_running_per_key holds back."""
    return [
        _chart(
            P.FAIR_KEYS_WAITING,
            "Fairness keys (tenants, orchestrators or sessions, by the type's fair_by) "
            "with jobs waiting, per agent type; the line at 1 names the field fair "
            "share goes by (none: it is off). With the exporter's --fair-key-top N, "
            "the jobs waiting on each of the N keys with the largest backlog.",
            by_key("fair_keys_waiting").unit,
            [
                _by_type(q.gauge_by_type(sel, "fair_keys_waiting"), " keys waiting"),
                (
                    f"max by ({q.BY_TYPE}, {FAIR_BY}) ({sel.series('fair_share_by')})",
                    "{{agent_type}} fair by {{fair_by}}",
                ),
                (
                    f"max by ({q.BY_TYPE}, {FAIR_KEY}) ({sel.series('fair_key_backlog')})",
                    "{{agent_type}} {{fair_key}} backlog",
                ),
            ],
            size=(8, 8),
        ),
        _chart(
            P.FAIR_KEY_WAIT,
            "How long keys with jobs waiting have gone without a start: the longest, "
            "and the median over keys. Close together: the keys take turns. Oldest "
            "far above the median: one key is starved (QueueFairKeyStarving), often "
            "held at its max_running_per_key; with --fair-key-top set, "
            "queue_fair_key_backlog names the largest keys.",
            by_key("fair_key_oldest_wait").unit,
            [
                _by_type(q.gauge_by_type(sel, "fair_key_oldest_wait"), " oldest key"),
                _by_type(q.gauge_by_type(sel, "fair_key_median_wait"), " median key"),
            ],
            size=(8, 8),
        ),
        _chart(
            P.FAIR_HELD_BACK,
            "Job starts per second held back because their key was at the type's "
            "max_running_per_key (no line for the limit: no cap). Steady while the "
            "key's jobs age: raise it (agentjobs limits set TYPE "
            "--max-running-per-key N).",
            "short",
            [
                _by_type(q.rate_by_type(sel, "held_back_max_running_per_key"), " held back/s"),
                _by_type(q.gauge_by_type(sel, "max_running_per_key_limit"), " per-key cap"),
            ],
            size=(8, 8),
        ),
    ]


def _exporter_row(sel: q.Selector) -> list[Placed]:
    return [
        _chart(
            P.EXPORTER_UP,
            "1 = up. `up` is Prometheus reaching the exporter; Redis up is the "
            "exporter reading Redis on its last scrape.",
            by_key("redis_up").unit,
            [
                (q.target_series(sel), "{{instance}} exporter up"),
                (q.target_series(sel, "redis_up"), "{{instance}} Redis up"),
            ],
            size=(8, 7),
        ),
        _chart(
            P.SCRAPE_DURATION,
            "Time the exporter's last scrape took to read Redis (one pipelined round trip).",
            by_key("scrape_duration").unit,
            [(q.target_series(sel, "scrape_duration"), "{{instance}}")],
            size=(8, 7),
        ),
        _chart(
            P.EXPORTER_ERRORS,
            "Values in Redis the exporter could not parse (per second), and agent types "
            "left out because the exporter's type cap was reached. Both should be 0.",
            "short",
            [
                (
                    f"max by (job, instance) ({sel.rate('malformed')})",
                    "{{instance}} malformed values/s",
                ),
                (q.target_series(sel, "types_dropped"), "{{instance}} agent types dropped"),
            ],
            size=(8, 7),
        ),
    ]


def _redis_row(config: MonitoringConfig, sel: q.Selector) -> list[Placed]:
    def by_node(key: str) -> str:
        return f"max by (job, node) ({sel.series(key)})"

    return [
        _chart(
            P.REDIS_MEMORY,
            "Memory each Redis primary uses, and its maxmemory limit (0 when "
            "unlimited). At the limit, under noeviction, writes are refused (OOM); "
            f"QueueRedisMemoryHigh fires above {q.number(config.redis_memory_high)} of it.",
            by_key("redis_memory_used").unit,
            [
                (by_node("redis_memory_used"), "{{node}} used"),
                (by_node("redis_memory_max"), "{{node}} maxmemory (0: none)"),
            ],
            size=(16, 7),
        ),
        (
            stat(
                P.REDIS_EVICTION_POLICY,
                PANEL_TITLES[P.REDIS_EVICTION_POLICY],
                "1 per primary whose maxmemory-policy is noeviction (required); 0 when it "
                "can evict queued jobs, results and counters. Empty when the exporter may "
                "not run INFO.",
                by_key("redis_policy_safe").unit,
                [(q.redis_policy_safe(sel), "{{node}} {{policy}}")],
                steps((None, "red"), (1, "green")),
            ),
            8,
            7,
        ),
        _chart(
            P.REDIS_CLIENTS,
            "Client connections to each Redis primary, and those blocked in a waiting "
            "command (idle workers in BLMOVE). Connections near maxclients are refused.",
            by_key("redis_clients").unit,
            [
                (q.redis_by_node(sel, "redis_clients"), "{{node}} connected"),
                (q.redis_by_node(sel, "redis_blocked_clients"), "{{node}} blocked"),
            ],
            size=(12, 7),
        ),
        _chart(
            P.REDIS_EVICTIONS,
            "Keys each Redis primary's maxmemory policy deleted, per second. Must be 0: "
            "an eviction loses queued jobs, results or counters without an error.",
            "ops",
            [(q.redis_rate_by_node(sel, "redis_evicted_keys"), "{{node}} evicted keys/s")],
            size=(12, 7),
            threshold_steps=steps((None, "green"), (0.001, "red")),
        ),
    ]


_SLO_PANELS: dict[SloKind, tuple[P, P, P]] = {
    "availability": (P.SLO_AVAILABILITY, P.SLO_AVAILABILITY_BUDGET, P.SLO_AVAILABILITY_BURN),
    "latency": (P.SLO_LATENCY, P.SLO_LATENCY_BUDGET, P.SLO_LATENCY_BURN),
}
_SLI_WINDOW = "1h"
"""The SLI drawn over time: the page's long window."""
_MEASURES: dict[SloKind, str] = {
    "availability": "the share of finished jobs that completed (failed for good, "
    "dead-lettered ones included, and expired jobs are the errors)",
    "latency": "the share of completed jobs within the latency threshold of their "
    "enqueue (default {threshold}s)",
}
_BURN_WINDOWS = ("5m", "1h", "6h")
"""The burn rates drawn: the page pairs' windows (the short one is the alerts' value)."""


def _burn_panel(config: MonitoringConfig, sel: q.Selector, kind: SloKind) -> Placed:
    slo = SloQueries(config, kind, sel)
    pairs = ", ".join(
        f"{pair.severity} at {q.number(pair.factor)}x over {pair.long} and {pair.short}"
        for pair in BURN_RATE_PAIRS
    )
    # The objective is 1x here: the budget lasts exactly the window. Dashed lines: 1x
    # and the page factors.
    lines = steps(
        (None, "green"),
        *zip((pair.factor for pair in BURN_RATE_PAIRS[::-1]), _BURN_COLOURS, strict=True),
    )
    return _chart(
        _SLO_PANELS[kind][2],
        f"How fast each agent type spends its {kind} error budget: the error ratio over "
        "a window divided by the budget (1 - the objective). At 1x (the objective) the "
        "budget lasts exactly the SLO window. The burn-rate alerts: "
        f"{pairs}, each over both windows. Dashed: 1x, 3x, 6x and 14.4x.",
        "short",
        [_by_type(slo.burn_rate(window), f" {window}") for window in _BURN_WINDOWS],
        size=(10, 8),
        threshold_steps=lines,
    )


_BURN_COLOURS = ("yellow", "orange", "dark-orange", "red")


def _objectives_text(config: MonitoringConfig, kind: SloKind) -> str:
    default = config.slo_default(kind)
    text = f"{q.number(default.target)} over {default.window} for every agent type"
    overrides = config.slo_objectives(kind)
    if overrides:
        listed = ", ".join(
            f"{name} {q.number(objective.target)} over {objective.window}"
            for name, objective in overrides.items()
        )
        text += f" but {listed}"
    return text


def _sli_panel(config: MonitoringConfig, sel: q.Selector, kind: SloKind) -> Placed:
    slo = SloQueries(config, kind, sel)
    default = config.slo_default(kind)
    measure = _MEASURES[kind].format(threshold=q.number(default.threshold_seconds or 0))
    return _chart(
        _SLO_PANELS[kind][0],
        f"The {kind} SLI of each agent type over the last {_SLI_WINDOW}: {measure}; its "
        f"last value is the SLI now. Each type's objective is drawn beside it "
        f"({_objectives_text(config, kind)}); dashed: the default objective. Below the "
        "objective the error budget burns faster than the window allows.",
        "percentunit",
        [
            _by_type(f"1 - {slo.error_ratio(_SLI_WINDOW)}", f" SLI ({_SLI_WINDOW})"),
            _by_type(slo.objective(), " objective"),
        ],
        size=(10, 8),
        threshold_steps=steps((None, "red"), (default.target, "green")),
        value_min=None,
    )


def _budget_panel(config: MonitoringConfig, sel: q.Selector, kind: SloKind) -> Any:
    slo = SloQueries(config, kind, sel)
    panel = _SLO_PANELS[kind][1]
    return stat(
        panel,
        PANEL_TITLES[panel],
        f"The share of each agent type's {kind} error budget (1 - the objective: "
        f"{_objectives_text(config, kind)}) left in its SLO window: 100% nothing spent, "
        "0% all of it, below 0 the objective is broken for the window. The burn-rate "
        "alerts fire long before it runs out.",
        "percentunit",
        [_by_type(slo.budget_left())],
        steps((None, "red"), (0, "orange"), (0.25, "green")),
        # Weeks of samples for every step of a range would be slow: the value now.
        instant=True,
    )


def _slo_row(config: MonitoringConfig, sel: q.Selector) -> list[Placed]:
    placed: list[Placed] = []
    for kind in _SLO_PANELS:
        placed += [
            _sli_panel(config, sel, kind),
            (_budget_panel(config, sel, kind), 4, 8),
            _burn_panel(config, sel, kind),
        ]
    return placed


def _layout(sections: Sequence[tuple[P, Sequence[Placed]]]) -> list[Any]:
    """Rows stacked top to bottom; each row's panels fill 24 columns left to right."""
    out: list[Any] = []
    y = 0
    for row_panel, items in sections:
        titled = row(row_panel, PANEL_TITLES[row_panel])
        out.append(attr.evolve(titled, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        x = line_height = 0
        for panel, width, height in items:
            if x + width > 24:
                y, x, line_height = y + line_height, 0, 0
            out.append(attr.evolve(panel, gridPos=GridPos(h=height, w=width, x=x, y=y)))
            x, line_height = x + width, max(line_height, height)
        y += line_height
    return out


def queue_overview(config: MonitoringConfig) -> Dashboard:
    sel = q.Selector.dashboard(config.namespace)
    panels = _layout(
        [
            (P.ROW_ALERTS, _alert_row(config)),
            (P.ROW_SLO, _slo_row(config, sel)),
            (P.ROW_QUEUE, _queue_row(config, sel)),
            (P.ROW_THROUGHPUT, _throughput_row(sel)),
            (P.ROW_LATENCY, _latency_row(config, sel)),
            (P.ROW_WORKERS, _workers_row(sel)),
            (P.ROW_LIMITS, _limits_row(sel)),
            (P.ROW_EXPORTER, _exporter_row(sel)),
            (P.ROW_REDIS, _redis_row(config, sel)),
        ]
    )
    alert_list = f"/alerting/list?search=namespace%3A{config.grafana_folder}"
    return Dashboard(
        title=QUEUE_OVERVIEW_TITLE,
        uid=QUEUE_OVERVIEW_UID,
        description="platform-common-jobs queues: depth, throughput, latency, workers, "
        "dead letters and the exporter's health.",
        tags=TAGS,
        schemaVersion=SCHEMA_VERSION,
        editable=False,  # provisioned from code: edits belong in dashboards/*.py
        graphTooltip=1,
        refresh="30s",
        timezone="browser",
        time=Time("now-6h", "now"),
        annotations=Annotations(list=[]),
        templating=_variables(config),
        links=[link("Alert rules", alert_list), link("Runbooks", config.runbook_index_url)],
        panels=panels,
    )
