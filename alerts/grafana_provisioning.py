"""Grafana file provisioning as plain dicts: alert rules, datasource, dashboards provider.

grafanalib 0.7.1's alerting classes emit the Ruler HTTP API's shape, which file
provisioning rejects. Each rule is A (instant Prometheus query) -> B (reduce: last,
non-numbers dropped) -> C (threshold), `condition: C`.
"""

from __future__ import annotations

import re
from typing import Any

from platform_common.jobs_monitoring.config import TRACE_ID_PLACEHOLDER, MonitoringConfig
from platform_common.jobs_monitoring.spec import AlertSpec, alert_specs, render_text

from .prometheus_rules import rule_annotations

__all__ = [
    "EXEMPLAR_TRACE_ID",
    "EXPR_DATASOURCE",
    "alert_rules",
    "dashboards_provider",
    "datasource",
    "rule_uid",
]

EXPR_DATASOURCE = "__expr__"
RULE_GROUP = "queue"
# How far back query A looks; instant queries only need the lookback of their windows.
QUERY_RANGE_SECONDS = 600


def rule_uid(name: str) -> str:
    """A stable uid from the alert name: 'QueueDepthHigh' -> 'pcj-queue-depth-high'."""
    return "pcj-" + re.sub(r"(?<!^)(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])", "-", name).lower()


def _query_model(spec: AlertSpec, config: MonitoringConfig) -> dict[str, Any]:
    return {
        "datasource": {"type": "prometheus", "uid": config.datasource_uid},
        "editorMode": "code",
        "expr": spec.query,
        "instant": True,
        "intervalMs": 1000,
        "legendFormat": "",
        "maxDataPoints": 43200,
        "range": False,
        "refId": "A",
    }


def _expression(ref_id: str, **model: Any) -> dict[str, Any]:
    return {
        "datasourceUid": EXPR_DATASOURCE,
        "model": {
            "datasource": {"type": EXPR_DATASOURCE, "uid": EXPR_DATASOURCE},
            "refId": ref_id,
            **model,
        },
        "refId": ref_id,
        "relativeTimeRange": {"from": 0, "to": 0},
    }


def _rule(spec: AlertSpec, config: MonitoringConfig) -> dict[str, Any]:
    notes = rule_annotations(spec, config)
    notes["summary"] = render_text(spec.summary, spec, "grafana")
    notes["description"] = render_text(spec.description, spec, "grafana")
    # Grafana links the panel through dashboardUid/panelId; the URL stays for notifications.
    return {
        "annotations": notes,
        "condition": "C",
        "dashboardUid": spec.dashboard_uid,
        "data": [
            {
                "datasourceUid": config.datasource_uid,
                "model": _query_model(spec, config),
                "refId": "A",
                "relativeTimeRange": {"from": QUERY_RANGE_SECONDS, "to": 0},
            },
            _expression(
                "B", expression="A", reducer="last", settings={"mode": "dropNN"}, type="reduce"
            ),
            _expression(
                "C",
                conditions=[{"evaluator": {"params": [spec.threshold], "type": spec.op}}],
                expression="B",
                type="threshold",
            ),
        ],
        "execErrState": "Error",
        "for": spec.for_,
        "isPaused": False,
        "labels": spec.labels(),
        "noDataState": spec.no_data_state,
        "panelId": int(spec.panel),
        "title": spec.name,
        "uid": rule_uid(spec.name),
    }


def alert_rules(config: MonitoringConfig) -> dict[str, Any]:
    """The unified-alerting provisioning file (`provisioning/alerting/*.yaml`)."""
    return {
        "apiVersion": 1,
        "groups": [
            {
                "folder": config.grafana_folder,
                "interval": config.rule_interval,
                "name": RULE_GROUP,
                "orgId": 1,
                "rules": [_rule(spec, config) for spec in alert_specs(config)],
            }
        ],
    }


EXEMPLAR_TRACE_ID = "trace_id"
"""The exemplar label holding a job's trace id (the exporter's, collector.EXEMPLAR_TRACE_ID)."""


def _json_data(config: MonitoringConfig) -> dict[str, Any]:
    data: dict[str, Any] = {"httpMethod": "POST", "timeInterval": "15s"}
    if config.trace_url:
        # Grafana puts the exemplar's value at ${__value.raw}; `$$` keeps file
        # provisioning from reading it as an environment variable.
        url = config.trace_url.replace(TRACE_ID_PLACEHOLDER, "$${__value.raw}")
        data["exemplarTraceIdDestinations"] = [{"name": EXEMPLAR_TRACE_ID, "url": url}]
    return data


def datasource(config: MonitoringConfig) -> dict[str, Any]:
    """The Prometheus datasource with the fixed uid that rules and dashboards use; with
    `trace_url`, each exemplar's trace id links there."""
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "access": "proxy",
                "editable": False,
                "isDefault": False,
                "jsonData": _json_data(config),
                "name": "Queue Prometheus",
                "orgId": 1,
                "type": "prometheus",
                "uid": config.datasource_uid,
                "url": config.prometheus_url,
            }
        ],
    }


def dashboards_provider(config: MonitoringConfig) -> dict[str, Any]:
    """A file provider loading the generated `dashboards/*.json` into the alerts' folder."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "allowUiUpdates": False,
                "disableDeletion": True,
                "folder": config.grafana_folder,
                "name": "platform-common-jobs",
                "options": {"path": config.grafana_dashboards_path},
                "orgId": 1,
                "type": "file",
                "updateIntervalSeconds": 60,
            }
        ],
    }
