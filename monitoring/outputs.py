"""Where each generated file goes, relative to the output root (this repository or --out DIR).

Users and docs link these paths, and the runbooks name the rule files, so they are
declared once here rather than in each renderer.
"""

from __future__ import annotations

__all__ = [
    "DASHBOARD_FILE",
    "GRAFANA_ALERT_RULES",
    "GRAFANA_DASHBOARD_PROVIDER",
    "GRAFANA_DATASOURCE",
    "GRAFANA_PROVISIONING",
    "PROMETHEUS_RULES",
    "PROMETHEUS_RULE_TESTS",
    "PROMETHEUS_SLO_RULE_TESTS",
    "RUNBOOKS_DIR",
    "RUNBOOK_SITE_DIR",
]

DASHBOARD_FILE = "dashboards/queue-overview.json"
GRAFANA_PROVISIONING = "alerts/grafana/provisioning"
GRAFANA_ALERT_RULES = f"{GRAFANA_PROVISIONING}/alerting/queue-alerts.yaml"
GRAFANA_DATASOURCE = f"{GRAFANA_PROVISIONING}/datasources/queue-prometheus.yaml"
GRAFANA_DASHBOARD_PROVIDER = f"{GRAFANA_PROVISIONING}/dashboards/queue-dashboards.yaml"
PROMETHEUS_RULES = "alerts/prometheus/queue-alerts.rules.yml"
PROMETHEUS_RULE_TESTS = "alerts/prometheus/queue-alerts.test.yml"
PROMETHEUS_SLO_RULE_TESTS = "alerts/prometheus/queue-slo.test.yml"
"""The burn-rate alerts' stories (their own file: its own evaluation interval)."""
RUNBOOKS_DIR = "runbooks"
"""One `<AlertName>.md` per alert and the `README.md` index (the exporter serves them)."""
RUNBOOK_SITE_DIR = f"{RUNBOOKS_DIR}/html"
"""The same pages as a static site: `<AlertName>.html` and `index.html`, to host anywhere."""
