"""The Prometheus rule file and its promtool unit tests, both generated from the alert spec."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.slo_queries import recording_rules
from platform_common.jobs_monitoring.spec import (
    AlertSpec,
    alert_specs,
    render_concrete,
    render_text,
)

from .promtool_cases import BoundaryCase, Scenario, boundary_cases, seconds
from .slo_cases import EVALUATION_MINUTES, SloTest, slo_cases

__all__ = [
    "GROUP_NAME",
    "SLO_GROUP_NAME",
    "promtool_tests",
    "rule_annotations",
    "rule_file",
    "slo_promtool_tests",
]

GROUP_NAME = "platform-common-jobs-queue"
SLO_GROUP_NAME = "platform-common-jobs-slo"
"""The SLOs' recording rules; the burn-rate alerts in GROUP_NAME read them."""


def rule_annotations(spec: AlertSpec, config: MonitoringConfig) -> dict[str, str]:
    """Prometheus-templated annotations (the Grafana ones differ only in `$value`)."""
    return {
        **_console_annotation(spec, config, "{{ $labels.agent_type }}"),
        "dashboard_url": config.dashboard_url(spec.dashboard_uid, spec.panel),
        "description": render_text(spec.description, spec, "prometheus"),
        "runbook_url": config.runbook_url(spec.runbook_slug),
        "summary": render_text(spec.summary, spec, "prometheus"),
    }


def _console_annotation(
    spec: AlertSpec, config: MonitoringConfig, agent_type: str
) -> dict[str, str]:
    """`console_url`: the console page of the alert's agent type, when the site has a
    console and the alert is about one agent type (the others have no such page)."""
    url = config.console_type_url(agent_type)
    return {"console_url": url} if url and spec.about_agent_type else {}


def rule_file(config: MonitoringConfig) -> dict[str, Any]:
    rules = [
        {
            "alert": spec.name,
            "annotations": rule_annotations(spec, config),
            "expr": spec.expr,
            "for": spec.for_,
            "labels": spec.labels(),
        }
        for spec in alert_specs(config)
    ]
    records = [
        {"expr": rule.expr, "labels": {"slo": rule.slo}, "record": rule.record}
        for rule in recording_rules(config)
    ]
    return {
        "groups": [
            {"interval": config.rule_interval, "name": GROUP_NAME, "rules": rules},
            {"interval": config.rule_interval, "name": SLO_GROUP_NAME, "rules": records},
        ]
    }


def _duration(total: int) -> str:
    """299 -> '4m59s', 300 -> '5m' (promtool's eval_time syntax)."""
    minutes, secs = divmod(total, 60)
    text = (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


def _expected(spec: AlertSpec, config: MonitoringConfig, scenario: Scenario) -> dict[str, Any]:
    labels = {**scenario.labels, **spec.labels()}
    rendered = {
        **_console_annotation(spec, config, labels.get("agent_type", "")),
        "dashboard_url": config.dashboard_url(spec.dashboard_uid, spec.panel),
        "description": render_concrete(spec.description, spec, labels, scenario.value_text),
        "runbook_url": config.runbook_url(spec.runbook_slug),
        "summary": render_concrete(spec.summary, spec, labels, scenario.value_text),
    }
    return {"exp_annotations": rendered, "exp_labels": labels}


def _input(scenario: Scenario) -> list[dict[str, str]]:
    return [{"series": series, "values": values} for series, values in scenario.series]


def _test(
    spec: AlertSpec,
    config: MonitoringConfig,
    scenario: Scenario,
    checks: Iterable[tuple[int, bool]],
) -> dict[str, Any]:
    """One input of `scenario`, and at each (seconds, fires?) check what the alert shows."""
    return {
        "input_series": _input(scenario),
        "interval": "1m",
        "alert_rule_test": [
            {
                "alertname": spec.name,
                "eval_time": _duration(at),
                "exp_alerts": [_expected(spec, config, scenario)] if fires else [],
            }
            for at, fires in checks
        ],
    }


def _tests_for(spec: AlertSpec, case: BoundaryCase, config: MonitoringConfig) -> list[Any]:
    fires_at = case.onset + seconds(spec.for_)
    # One second short of `for`: pending, not firing.
    firing = _test(spec, config, case.firing, ((fires_at - 1, False), (fires_at, True)))
    quiet = [_test(spec, config, scenario, ((fires_at + 60, False),)) for scenario in case.quiet]
    timelines = [_test(spec, config, t.scenario, t.checks) for t in case.timelines]
    return [firing, *quiet, *timelines]


def _slo_test(spec: AlertSpec, test: SloTest, config: MonitoringConfig) -> dict[str, Any]:
    """One story: the alert at each check, and Grafana's inline query beside it (firing
    with the same value as the recorded rule, or as silent)."""
    assert spec.rule_query is not None
    alerts: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    for minute, scenario in test.checks:
        at = _duration(minute * 60)
        expected = [] if scenario is None else [_expected(spec, config, scenario)]
        alerts.append({"alertname": spec.name, "eval_time": at, "exp_alerts": expected})
        if scenario is None:
            queries.append({"eval_time": at, "expr": spec.query, "exp_samples": []})
            continue
        same = f"abs({spec.query} - on (job, agent_type) {spec.rule_query}) < bool 1e-9"
        labels = ", ".join(f'{k}="{v}"' for k, v in sorted(scenario.labels.items()))
        sample = {"labels": f"{{{labels}}}", "value": 1}
        queries.append({"eval_time": at, "expr": same, "exp_samples": [sample]})
    return {
        "name": f"{spec.name}: {test.case.title}",
        "input_series": [{"series": series, "values": values} for series, values in test.series],
        "interval": f"{test.case.interval}m",
        "alert_rule_test": alerts,
        "promql_expr_test": queries,
    }


def promtool_tests(config: MonitoringConfig, rule_file_name: str) -> dict[str, Any]:
    """A `promtool test rules` file for the rule file `rule_file_name` (same directory)."""
    cases = boundary_cases(config)
    tests: list[Any] = []
    for spec in alert_specs(config):
        if spec.slo is None:  # the burn-rate alerts have their own file
            tests.extend(_tests_for(spec, cases[spec.name], config))
    # The rule group's own interval: "one second short of `for`" then sees what the
    # last real evaluation before it decided, as a running Prometheus would.
    return {
        "evaluation_interval": config.rule_interval,
        "rule_files": [rule_file_name],
        "tests": tests,
    }


def slo_promtool_tests(config: MonitoringConfig, rule_file_name: str) -> dict[str, Any]:
    """The burn-rate alerts' stories (slo_cases.py), a `promtool test rules` file for
    the rule file `rule_file_name`."""
    tests: list[Any] = []
    for spec in alert_specs(config):
        if spec.slo is not None:
            severity = "page" if spec.severity == "critical" else "ticket"
            tests.extend(_slo_test(spec, t, config) for t in slo_cases(config, spec.slo, severity))
    # The recordings first at each evaluation: the alerts read this evaluation's (a
    # Prometheus, whose groups run apart, reads them at most one interval late).
    return {
        "evaluation_interval": f"{EVALUATION_MINUTES}m",
        "group_eval_order": [SLO_GROUP_NAME, GROUP_NAME],
        "rule_files": [rule_file_name],
        "tests": tests,
    }
