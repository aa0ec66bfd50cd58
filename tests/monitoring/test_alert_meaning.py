"""Alerts that mean what they say: QueueIdle is a true idle signal (silent at 11 jobs/s
with an empty queue, firing as long after traffic stops as its summary says), the
expiry and exporter-data alerts are proven at their thresholds, and the Grafana rules
use only what the minimum Grafana accepts."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.alerts.prometheus_rules import promtool_tests, rule_file
from platform_common.jobs_monitoring.alerts.promtool_cases import (
    BUSY_IN_PROGRESS,
    BUSY_PER_MINUTE,
    boundary_cases,
)
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.spec import alert_specs
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
OLDEST_GRAFANA_THRESHOLDS = {"gt", "lt"}
"""Threshold types every Grafana since 9 accepts; eq/ne/gte/lte arrived in 2025."""
NEW_ALERTS = (
    "JobsExpiring", "QueueExporterDroppingAgentTypes", "QueueExporterMalformedValues",
    "QueuePausedTooLong", "QueueHeldAtRateLimit", "QueueFairKeyStarving",
)  # fmt: skip

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def _write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=True, width=10**6))
    return path


def _run(tmp_path: Path, rules: dict[str, Any], config: MonitoringConfig, only: str) -> str:
    """promtool on `config`'s tests of alert `only` against `rules`; its output."""
    _write(tmp_path / "rules.yml", rules)
    document = promtool_tests(config, "rules.yml")
    document["tests"] = [
        test
        for test in document["tests"]
        if all(check["alertname"] == only for check in test["alert_rule_test"])
    ]
    assert document["tests"], only
    result = promtool("test", "rules", str(_write(tmp_path / "tests.yml", document)))
    return result.stdout + result.stderr if result.returncode else ""


def test_grafana_rules_use_only_thresholds_every_supported_grafana_accepts() -> None:
    document = yaml.safe_load((ROOT / outputs.GRAFANA_ALERT_RULES).read_text())
    types = {
        condition["evaluator"]["type"]
        for group in document["groups"]
        for rule in group["rules"]
        for condition in rule["data"][2]["model"]["conditions"]
    }
    assert types <= OLDEST_GRAFANA_THRESHOLDS
    said = (ROOT / "README.md").read_text() + (ROOT / "docs/monitoring.md").read_text()
    assert "Grafana 10.4" in said and "`eq`" in said


def test_readme_lists_every_alert_with_its_severity_and_action() -> None:
    readme = (ROOT / "docs/monitoring.md").read_text()
    rows = re.findall(r"^\| (\w+) \| `(\w+)` \| `([\w-]+)` \| (.+) \|$", readme, re.MULTILINE)
    listed = {name: (severity, action, who) for name, severity, action, who in rows}
    specs = alert_specs(load_config())
    assert set(listed) == {spec.name for spec in specs}
    for spec in specs:
        severity, action, who = listed[spec.name]
        assert (severity, action) == (spec.severity, spec.action), spec.name
        assert ("autoscaler" in who) == (spec.action in {"scale-up", "scale-down"}), spec.name


def test_queue_idle_cases_are_the_busy_traffic_and_the_stop() -> None:
    case = boundary_cases(load_config())["QueueIdle"]
    busy = dict(case.quiet[0].series)
    [enqueued] = [v for s, v in busy.items() if s.startswith("jobs_enqueued_total")]
    [running] = [v for s, v in busy.items() if s.startswith("jobs_in_progress")]
    [depth] = [v for s, v in busy.items() if s.startswith("queue_depth")]
    assert enqueued.startswith(f"0+{BUSY_PER_MINUTE}x") and BUSY_PER_MINUTE / 60 == 11
    assert set(running.split()) == {str(n) for n in BUSY_IN_PROGRESS} and depth.startswith("0x")
    [timeline] = case.timelines
    assert [fires for _, fires in timeline.checks] == [False, False, True]


def test_queue_idle_stays_silent_while_busy_and_fires_after_traffic_stops(tmp_path: Path) -> None:
    config = load_config()
    assert _run(tmp_path, rule_file(config), config, "QueueIdle") == ""


def test_the_old_empty_queue_rule_fails_the_idle_cases(tmp_path: Path) -> None:
    config = load_config()
    rules = rule_file(config)
    [idle] = [r for r in rules["groups"][0]["rules"] if r["alert"] == "QueueIdle"]
    idle["expr"] = f'max by (job, agent_type) (queue_depth{{job="{config.job}"}}) < 1'
    idle["for"] = config.queue_idle_for
    output = _run(tmp_path, rules, config, "QueueIdle")
    assert "time: 11m" in output  # fired on the busy queue with nothing waiting
    assert "time: 18m59s" in output  # fired before traffic had stopped for 10m


def test_a_5m_window_held_for_10m_fails_the_idle_cases(tmp_path: Path) -> None:
    """The rule that said "idle for 10m" and fired 15 minutes after traffic stopped: any
    5m window empty, for 10m more."""
    config = load_config()
    rules = rule_file(config)
    [idle] = [r for r in rules["groups"][0]["rules"] if r["alert"] == "QueueIdle"]
    activity = idle["expr"].split(" + on ")[0].removeprefix("(")
    idle["expr"] = activity.replace(f"[{config.queue_idle_for}]", "[5m]") + " < 1"
    idle["for"] = config.queue_idle_for
    output = _run(tmp_path, rules, config, "QueueIdle")
    assert "time: 10m" in output  # silent after 10 quiet minutes from the start
    assert "time: 20m" in output  # silent 10 minutes after traffic stopped


@pytest.mark.parametrize("name", NEW_ALERTS)
def test_new_alerts_fire_just_above_and_stay_silent_at_their_threshold(
    tmp_path: Path, name: str
) -> None:
    config = load_config()
    assert name in {spec.name for spec in alert_specs(config)}
    assert _run(tmp_path, rule_file(config), config, name) == ""


@pytest.mark.parametrize(
    ("name", "moved"),
    [
        # One expiry a minute is the firing case: a threshold just above it must not fire.
        ("JobsExpiring", {"expired_rate_high": 0.02}),
        ("JobsExpiring", {"expired_rate_high_for": "4m"}),
        ("QueueExporterDroppingAgentTypes", {"agent_types_dropped_for": "4m"}),
        ("QueueExporterMalformedValues", {"malformed_values_for": "4m"}),
        ("QueuePausedTooLong", {"queue_paused_too_long_for": "40m"}),
        ("QueueHeldAtRateLimit", {"held_at_rate_limit_for": "20m"}),
        # The firing case is just over ratio x median and over the floor: either moved up
        # a little, or a longer `for`, must not fire on it.
        ("QueueFairKeyStarving", {"fair_key_starving_ratio": 11}),
        ("QueueFairKeyStarving", {"fair_key_starving_floor_seconds": 330}),
        ("QueueFairKeyStarving", {"fair_key_starving_for": "15m"}),
    ],
)
def test_boundary_cases_catch_a_moved_threshold_or_for(
    tmp_path: Path, name: str, moved: dict[str, Any]
) -> None:
    committed = load_config()
    changed_rules = rule_file(replace(committed, **moved))
    assert _run(tmp_path, changed_rules, committed, name) != ""


@pytest.mark.parametrize(
    ("threshold", "firing", "quiet", "onset"),
    [
        (0.5, "0+31x30", "0+29x30", 300),  # 31/60 and 29/60 jobs/s around 0.5
        # One a minute: the rate passes 0.01/s while the window fills, at 4 of 5 minutes.
        (0.01, "0+1x30", "0+0x30", 240),
    ],
)
def test_a_nonzero_expiry_threshold_gets_its_own_boundaries(
    tmp_path: Path, threshold: float, firing: str, quiet: str, onset: int
) -> None:
    config = replace(load_config(), expired_rate_high=threshold)
    assert _run(tmp_path, rule_file(config), config, "JobsExpiring") == ""
    case = boundary_cases(config)["JobsExpiring"]
    [(_, firing_values)] = case.firing.series
    [(_, quiet_values)] = case.quiet[0].series
    assert (firing_values, quiet_values, case.onset) == (firing, quiet, onset)
