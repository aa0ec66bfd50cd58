"""The Prometheus rule file and its promtool unit tests, both generated from the alert spec."""

from __future__ import annotations

from typing import Any

from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.spec import (
    AlertSpec,
    alert_specs,
    render_concrete,
    render_text,
)

from .promtool_cases import BoundaryCase, Scenario, boundary_cases, seconds

__all__ = ["GROUP_NAME", "promtool_tests", "rule_annotations", "rule_file"]

GROUP_NAME = "platform-common-jobs-queue"


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
    return {"groups": [{"interval": config.rule_interval, "name": GROUP_NAME, "rules": rules}]}


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


def _tests_for(spec: AlertSpec, case: BoundaryCase, config: MonitoringConfig) -> list[Any]:
    fires_at = case.onset + seconds(spec.for_)
    firing = {
        "input_series": _input(case.firing),
        "interval": "1m",
        "alert_rule_test": [
            # One second short of `for`: pending, not firing.
            {"alertname": spec.name, "eval_time": _duration(fires_at - 1), "exp_alerts": []},
            {
                "alertname": spec.name,
                "eval_time": _duration(fires_at),
                "exp_alerts": [_expected(spec, config, case.firing)],
            },
        ],
    }
    quiet = [
        {
            "input_series": _input(scenario),
            "interval": "1m",
            "alert_rule_test": [
                {"alertname": spec.name, "eval_time": _duration(fires_at + 60), "exp_alerts": []}
            ],
        }
        for scenario in case.quiet
    ]
    timelines = [
        {
            "input_series": _input(timeline.scenario),
            "interval": "1m",
            "alert_rule_test": [
                {
                    "alertname": spec.name,
                    "eval_time": _duration(at),
                    "exp_alerts": [_expected(spec, config, timeline.scenario)] if fires else [],
                }
                for at, fires in timeline.checks
            ],
        }
        for timeline in case.timelines
    ]
    return [firing, *quiet, *timelines]


def promtool_tests(config: MonitoringConfig, rule_file_name: str) -> dict[str, Any]:
    """A `promtool test rules` file for the rule file `rule_file_name` (same directory)."""
    cases = boundary_cases(config)
    tests: list[Any] = []
    for spec in alert_specs(config):
        tests.extend(_tests_for(spec, cases[spec.name], config))
    # The rule group's own interval: "one second short of `for`" then sees what the
    # last real evaluation before it decided, as a running Prometheus would.
    return {
        "evaluation_interval": config.rule_interval,
        "rule_files": [rule_file_name],
        "tests": tests,
    }
