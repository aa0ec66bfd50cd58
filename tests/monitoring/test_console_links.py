"""The site's `console_url`: alerts about one agent type link its console page (a
`console_url` annotation that promtool expands, the Alertmanager text shows it) and their
runbooks say where it is; without the setting nothing mentions a console."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs_monitoring.alerts.prometheus_rules import promtool_tests, rule_file
from platform_common.jobs_monitoring.runbooks.render import render_runbooks
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.spec import alert_specs
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "alerts/alertmanager/queue-notifications.tmpl"
CONSOLE = "https://ops.example.com/console"
PER_TYPE = {
    "DeadLetterDepthHigh", "JobFailureRatioHigh", "JobLatencyP95AboveSLO", "JobsExpiring",
    "OldestJobOlderThanTTL", "QueueDepthHigh", "QueueIdle", "QueueNoActiveWorkers",
    "JobAvailabilityBudgetBurnFast", "JobAvailabilityBudgetBurnSlow",
    "JobLatencyBudgetBurnFast", "JobLatencyBudgetBurnSlow",
    "QueuePausedTooLong", "QueueHeldAtRateLimit", "QueueFairKeyStarving",
}  # fmt: skip
"""The alerts that fire per agent type (the others are about the exporter or Redis)."""


def _write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_alerts_about_an_agent_type_are_the_ones_with_the_label() -> None:
    assert {s.name for s in alert_specs(load_config()) if s.about_agent_type} == PER_TYPE


def test_without_console_url_no_alert_or_runbook_mentions_a_console() -> None:
    config = load_config()
    assert config.console_url == "" and config.console_type_url("dining") == ""
    for rule in rule_file(config)["groups"][0]["rules"]:
        assert "console_url" not in rule["annotations"], rule["alert"]
    assert not [name for name, page in render_runbooks(config).items() if "console" in page]


def test_console_url_must_be_an_http_url() -> None:
    with pytest.raises(ConfigurationError, match="console_url"):
        replace(load_config(), console_url="javascript:alert(1)")


def test_promtool_expands_the_console_url_of_the_alerts_agent_type(tmp_path: Path) -> None:
    config = replace(load_config(), console_url=CONSOLE + "/")
    rules = rule_file(config)["groups"][0]["rules"]
    annotated = {r["alert"] for r in rules if "console_url" in r["annotations"]}
    assert annotated == PER_TYPE
    for rule in rules:
        if rule["alert"] in PER_TYPE:
            assert rule["annotations"]["console_url"] == (
                f"{CONSOLE}/types/{{{{ $labels.agent_type }}}}"
            )
    _write(tmp_path / "rules.yml", rule_file(config))
    tests = promtool_tests(config, "rules.yml")
    expected = [
        alert["exp_annotations"].get("console_url")
        for test in tests["tests"]
        for check in test["alert_rule_test"]
        for alert in check["exp_alerts"]
        if check["alertname"] in PER_TYPE
    ]
    # The boundary cases' agent type, expanded by promtool from the firing series' label.
    assert expected and set(expected) == {f"{CONSOLE}/types/dining"}
    result = promtool("test", "rules", str(_write(tmp_path / "tests.yml", tests)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_per_type_runbook_names_the_console_page() -> None:
    config = replace(load_config(), console_url=CONSOLE)
    pages = render_runbooks(config)
    line = (
        "Open the console page of the alert's agent type: the alert's `console_url` link, "
        f"or\n`{CONSOLE}/types/<agent_type>`."
    )
    for name, page in pages.items():
        assert (line in page) == (name.removesuffix(".md") in PER_TYPE), name


@pytest.mark.skipif(shutil.which("amtool") is None, reason="needs amtool")
@pytest.mark.parametrize("console_url", [f"{CONSOLE}/types/dining", None])
def test_the_notification_shows_the_console_link_when_present(
    tmp_path: Path, console_url: str | None
) -> None:
    annotations = {"summary": "s", "runbook_url": "https://r/x", "dashboard_url": "https://g/d"}
    if console_url:
        annotations["console_url"] = console_url
    alert = {"status": "firing", "labels": {"alertname": "QueueDepthHigh"},
             "annotations": annotations}  # fmt: skip
    data = {"status": "firing", "alerts": [alert], "commonLabels": alert["labels"]}
    (tmp_path / "data.json").write_text(json.dumps(data))
    amtool = shutil.which("amtool")
    assert amtool is not None
    result = subprocess.run(
        [amtool, "template", "render", f"--template.glob={TEMPLATES}",
         '--template.text={{ template "queue.text" . }}',
         f"--template.data={tmp_path / 'data.json'}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    tail = f"Dashboard: https://g/d\nConsole: {console_url}\n" if console_url else "https://g/d\n"
    assert result.stdout.endswith(tail) and ("Console:" in result.stdout) == bool(console_url)
