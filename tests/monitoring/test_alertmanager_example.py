"""The Alertmanager example (alerts/alertmanager/): amtool accepts it, every alert of the
spec reaches the receivers its `severity` and `action` promise, and the notification
shows the summary, the runbook link and an absolute dashboard link."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.spec import AlertSpec, alert_specs, render_concrete

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "alerts/alertmanager"
CONFIG_FILE = EXAMPLE / "alertmanager.yml"
TEMPLATES = EXAMPLE / "queue-notifications.tmpl"
GRAFANA = "https://grafana.example.com"
"""The Grafana address the example template puts before relative dashboard links."""
SCALING = {"scale-up", "scale-down"}
BY_SEVERITY = {"critical": "pager", "warning": "chat", "info": "nobody"}

pytestmark = pytest.mark.skipif(
    shutil.which("amtool") is None, reason="needs amtool (prometheus-alertmanager)"
)


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("amtool")
    assert binary is not None
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)


def test_amtool_check_config_accepts_the_example_and_its_template() -> None:
    result = amtool("check-config", str(CONFIG_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 templates" in result.stdout and "FAILED" not in result.stdout


def test_amtool_check_config_fails_on_a_broken_template(tmp_path: Path) -> None:
    # The check above proves something only if amtool parses the template file.
    shutil.copy(CONFIG_FILE, tmp_path / CONFIG_FILE.name)
    broken = TEMPLATES.read_text().replace("{{ end -}}", "{{ ende -}}", 1)
    (tmp_path / TEMPLATES.name).write_text(broken)
    result = amtool("check-config", str(tmp_path / CONFIG_FILE.name))
    assert result.returncode != 0 and '"ende" not defined' in result.stdout


def _receivers(spec: AlertSpec) -> set[str]:
    labels = [
        f"{name}={value}" for name, value in {"alertname": spec.name, **spec.labels()}.items()
    ]
    result = amtool("config", "routes", "test", f"--config.file={CONFIG_FILE}", *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    return set(result.stdout.strip().split(","))


def test_every_alert_routes_by_severity_and_action() -> None:
    specs = alert_specs(load_config())
    assert {spec.severity for spec in specs} == set(BY_SEVERITY)
    assert {spec.action for spec in specs} >= SCALING
    for spec in specs:
        expected = {BY_SEVERITY[spec.severity]} | (
            {"autoscaler"} if spec.action in SCALING else set()
        )
        assert _receivers(spec) == expected, spec.name


def _notification(spec: AlertSpec, annotations: dict[str, str]) -> dict[str, Any]:
    labels = {"alertname": spec.name, **spec.labels(), "agent_type": "dining"}
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": annotations,
        "startsAt": "2025-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": "0",
    }
    return {
        "receiver": "chat",
        "status": "firing",
        "alerts": [alert],
        "groupLabels": {"alertname": spec.name},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "http://alertmanager:9093",
    }


def _render(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    result = amtool(
        "template", "render", f"--template.glob={TEMPLATES}",
        '--template.text={{ template "queue.title" . }}\n{{ template "queue.text" . }}',
        f"--template.data={path}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_notification_shows_summary_runbook_and_dashboard_link(tmp_path: Path) -> None:
    config = load_config()
    for spec in alert_specs(config):
        labels = {"agent_type": "dining", "instance": "queue-exporter:9808", "job": config.job,
                  "node": "queue-redis:6379", "policy": "allkeys-lru"}  # fmt: skip
        summary = render_concrete(spec.summary, spec, labels, "5")
        dashboard = config.dashboard_url(spec.dashboard_uid, spec.panel)
        runbook = config.runbook_url(spec.runbook_slug)
        text = _render(
            tmp_path,
            _notification(
                spec, {"summary": summary, "runbook_url": runbook, "dashboard_url": dashboard}
            ),
        )
        absolute = dashboard if dashboard.startswith("http") else GRAFANA + dashboard
        assert text.splitlines()[0] == (
            f"[FIRING:1] {spec.name} ({spec.severity}, action={spec.action})"
        )
        assert f"{summary}\nRunbook: {runbook}\nDashboard: {absolute}\n" in text, spec.name


def test_an_absolute_dashboard_link_is_kept_as_it_is(tmp_path: Path) -> None:
    spec = alert_specs(load_config())[0]
    site_link = "https://grafana.site.example/d/queue-overview?viewPanel=11"
    annotations = {"summary": "s", "runbook_url": "https://r/", "dashboard_url": site_link}
    text = _render(tmp_path, _notification(spec, annotations))
    assert f"Dashboard: {site_link}\n" in text and GRAFANA not in text
