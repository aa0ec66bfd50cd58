"""Runbook pages rendered with jinja2 from the alert spec: one per alert, plus an index.

Each page's header (threshold, `for`, query, dashboard panel) comes from the same
`AlertSpec` the rules are generated from; the prose lives in
`runbooks/templates/<AlertName>.md.j2`, which extends `_layout.md.j2` (every page has
SECTIONS). The runbooks never import the other renderers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from platform_common.jobs.dashboard_ids import (
    PANEL_TITLES,
    QUEUE_OVERVIEW_TITLE,
    QUEUE_OVERVIEW_UID,
)
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.metric_catalogue import CATALOGUE, FAIR_READ_ALL_KEYS, FAIR_SAMPLE_KEYS
from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring import queries as q
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.slo import (
    BURN_RATE_PAIRS,
    SLO_KINDS,
    BurnRatePair,
    window_seconds,
)
from platform_common.jobs_monitoring.slo_queries import (
    BUDGET_REMAINING,
    ERROR_BUDGET,
    SloQueries,
    sli_error,
)
from platform_common.jobs_monitoring.spec import AlertSpec, alert_specs, render_text

__all__ = ["INDEX", "SECTIONS", "TEMPLATES", "render_runbooks"]

# Package data, like the pages. Resolved: an editable install links files one by one, so
# a template added since the install is found in the source folder all the same.
TEMPLATES = Path(__file__).resolve().parent / "templates"
INDEX = "README.md"
SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation", "Escalation")
# Shell variable the pages export once; keys are written with it so they paste as-is.
SHELL_AGENT_TYPE = "$AGENT_TYPE"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,  # a misspelt variable fails generation
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # markdown, not HTML
    )


def _diagnosis_queries(config: MonitoringConfig) -> dict[str, str]:
    """PromQL for the Diagnosis sections: the alerts' selector, every agent type."""
    sel = q.Selector.alerts(config.namespace, config.job)
    queries = {
        "active_workers": q.gauge_by_type(sel, "active_workers"),
        "depth": q.gauge_by_type(sel, "queue_depth"),
        "heartbeat_age": q.heartbeat_age(sel),
        "oldest_age": q.gauge_by_type(sel, "oldest_age"),
        "p95": q.latency_quantile(sel, 0.95),
    }
    for key in ("enqueued", "completed", "failed", "retried", "dead_lettered", "expired"):
        queries[f"{key}_rate"] = q.rate_by_type(sel, key)
    return queries


def _limits_text(default: float, overrides: dict[str, float], what: str) -> str:
    text = f"{q.number(default)}s for every agent type"
    if overrides:
        listed = ", ".join(f"`{name}` {q.number(limit)}s" for name, limit in overrides.items())
        text = f"{listed}; {q.number(default)}s for the others"
    return f"{text} ({what})."


def _spent(pair: BurnRatePair, window: str) -> str:
    """The share of a `window` budget a pair has spent when it fires: factor x long / window."""
    return f"{pair.factor * window_seconds(pair.long) / window_seconds(window) * 100:.2g}%"


def _slo_context(config: MonitoringConfig) -> dict[str, Any]:
    """Per SLO: its objectives in words, the workbook's pairs with the share of the
    budget each has spent when it fires, and the queries of the SLO pages."""
    sel = q.Selector.alerts(config.namespace, config.job)
    context: dict[str, Any] = {}
    for kind in SLO_KINDS:
        slo = SloQueries(config, kind, sel)
        default = config.slo_default(kind)
        matchers = ", ".join(sel.target_matchers)
        every_window = f'{{__name__=~"{sli_error("(.+)")}", {matchers}, slo="{kind}"}}'
        context[kind] = {
            "default": default,
            "budget": f"{default.error_budget * 100:.4g}%",
            "overrides": config.slo_objectives(kind),
            "pairs": [(pair, _spent(pair, default.window)) for pair in BURN_RATE_PAIRS],
            # The burn rate over every window the alerts read, one series per window.
            "burn_by_window": (
                f'label_replace({every_window}, "window", "$1", "__name__", '
                f'"{sli_error("(.+)")}") / on (job, agent_type, slo) group_left () '
                f"{slo.recorded(ERROR_BUDGET)}"
            ),
            "budget_left": slo.recorded(BUDGET_REMAINING),
        }
    return context


def _context(config: MonitoringConfig) -> dict[str, Any]:
    return {
        "config": config,
        "dashboard_title": QUEUE_OVERVIEW_TITLE,
        "dashboard_url": config.dashboard_url(QUEUE_OVERVIEW_UID),
        "grafana_file": outputs.GRAFANA_ALERT_RULES,
        "keys": QueueKeys(SHELL_AGENT_TYPE),
        "fair_read_all_keys": FAIR_READ_ALL_KEYS,
        "fair_sample_keys": FAIR_SAMPLE_KEYS,
        "names": {metric.key: metric.full_name(config.namespace) for metric in CATALOGUE},
        "prometheus_file": outputs.PROMETHEUS_RULES,
        "q": _diagnosis_queries(config),
        "slo_text": _limits_text(
            config.default_latency_slo,
            config.latency_slos(),
            f"{q.number(config.latency_slo_fraction_of_ttl)} x the job TTL unless overridden",
        ),
        "ttl_text": _limits_text(config.job_ttl_seconds, config.job_ttls(), "job TTL"),
        "window": q.Selector.alerts(config.namespace, config.job).window,
        "slo": _slo_context(config),
    }


def _page(env: jinja2.Environment, base: dict[str, Any], spec: AlertSpec) -> str:
    return env.get_template(f"{spec.name}.md.j2").render(
        base,
        spec=spec,
        summary=render_text(spec.summary, spec, "runbook"),
        description=render_text(spec.description, spec, "runbook"),
        dashboard_url=base["config"].dashboard_url(spec.dashboard_uid, spec.panel),
        panel_title=PANEL_TITLES[spec.panel],
    )


def render_runbooks(config: MonitoringConfig) -> dict[str, str]:
    """File name -> markdown, for every alert and the index."""
    env = _environment()
    base = _context(config)
    specs = alert_specs(config)
    pages = {f"{spec.name}.md": _page(env, base, spec) for spec in specs}
    items = [{"spec": s, "summary": render_text(s.summary, s, "runbook")} for s in specs]
    pages[INDEX] = env.get_template("README.md.j2").render(base, specs=specs, items=items)
    return pages
