"""The alert spec and its outputs: promtool proves every threshold; Grafana provisioning is
what file provisioning accepts (our schema); both systems carry the same alerts."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs_monitoring.alerts.grafana_provisioning import EXPR_DATASOURCE
from platform_common.jobs_monitoring.alerts.prometheus_rules import promtool_tests, rule_file
from platform_common.jobs_monitoring.alerts.promtool_cases import boundary_cases, seconds
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.slo_queries import recording_rules
from platform_common.jobs_monitoring.spec import alert_specs
from tests.monitoring.schema_check import errors, schema
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts/prometheus/queue-alerts.rules.yml"
RULE_TESTS = ROOT / "alerts/prometheus/queue-alerts.test.yml"
PROVISIONING = ROOT / "alerts/grafana/provisioning"
GRAFANA_RULES = PROVISIONING / "alerting/queue-alerts.yaml"
UID = re.compile(r"[a-zA-Z0-9_-]{1,40}")
REDUCERS = {"last", "mean", "min", "max", "sum", "count", "median"}

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=True, width=10**6))
    return path


@pytest.fixture(scope="module")
def grafana_rules() -> list[dict[str, Any]]:
    document = load_yaml(GRAFANA_RULES)
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def prometheus_rules() -> list[dict[str, Any]]:
    """The alerting rules (the SLOs' recording rules are in a group of their own)."""
    rules = [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]
    return [rule for rule in rules if "alert" in rule]


# -- promtool --------------------------------------------------------------------


def test_promtool_check_rules_passes_with_lint_fatal() -> None:
    result = promtool("check", "rules", "--lint-fatal", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    config = load_config()
    count = len(alert_specs(config)) + len(recording_rules(config))
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_case_at_its_boundaries() -> None:
    config = load_config()
    tests = load_yaml(RULE_TESTS)["tests"]
    cases = boundary_cases(config)
    for spec in alert_specs(config):
        if spec.slo is not None:  # the burn-rate alerts' stories: tests/monitoring/test_slo.py
            continue
        fires_at = cases[spec.name].onset + seconds(spec.for_)
        checks = [
            (seconds(check["eval_time"]), bool(check["exp_alerts"]))
            for test in tests
            for check in test["alert_rule_test"]
            if check["alertname"] == spec.name
        ]
        assert (fires_at - 1, False) in checks, spec.name  # pending one second short
        assert (fires_at, True) in checks, spec.name  # firing exactly at `for`
        quiet = [t for t, firing in checks if not firing and t > fires_at]
        assert quiet, f"{spec.name}: no quiet value-boundary case"


def _run_tests_against(tmp_path: Path, config: MonitoringConfig, only: str) -> str:
    """The committed tests of alert `only`, run against rules generated from `config`."""
    write_yaml(tmp_path / "rules.yml", rule_file(config))
    document = load_yaml(RULE_TESTS)
    document["rule_files"] = ["rules.yml"]
    document["tests"] = [
        test
        for test in document["tests"]
        if all(check["alertname"] == only for check in test["alert_rule_test"])
    ]
    result = promtool("test", "rules", str(write_yaml(tmp_path / "tests.yml", document)))
    assert result.returncode != 0, f"tests of {only} did not notice the changed rule"
    return result.stdout + result.stderr


def test_unit_tests_catch_a_moved_threshold(tmp_path: Path) -> None:
    moved = replace(load_config(), queue_depth_high=101)
    _run_tests_against(tmp_path, moved, "QueueDepthHigh")


def test_unit_tests_catch_a_shorter_for(tmp_path: Path) -> None:
    shorter = replace(load_config(), queue_depth_high_for="4m")
    output = _run_tests_against(tmp_path, shorter, "QueueDepthHigh")
    assert "4m59s" in output  # it fired one second before the boundary


def test_per_agent_type_slo_and_ttl_overrides_are_what_the_rules_use(tmp_path: Path) -> None:
    # This config's boundary cases put dining's p95 just under / over 45 s and its oldest
    # job at / over 120 s: with the defaults (30 s, 60 s) they would fire or show other
    # values, so they pass only if the rules use the overrides.
    config = replace(
        load_config(),
        latency_slo_overrides={"dining": 45.0, "flights": 300.0},
        job_ttl_overrides={"dining": 120.0},
    )
    assert config.latency_slos() == {"dining": 45.0, "flights": 300.0}
    write_yaml(tmp_path / "rules.yml", rule_file(config))
    tests = write_yaml(tmp_path / "tests.yml", promtool_tests(config, "rules.yml"))
    assert promtool("check", "rules", str(tmp_path / "rules.yml")).returncode == 0
    result = promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
    # And the default SLO still applies to the types without an override.
    default = load_config()
    expr = {spec.name: spec.expr for spec in alert_specs(config)}["JobLatencyP95AboveSLO"]
    assert f"* {default.default_latency_slo:g}" in expr and '"flights"' in expr


def test_test_settings_only_shorten_for(tmp_path: Path) -> None:
    normal = alert_specs(load_config())
    short = alert_specs(load_config().test_settings(for_="3s"))
    assert [s.for_ for s in short] == ["3s"] * len(normal)
    assert [s.expr for s in short] == [s.expr for s in normal]
    rules = write_yaml(tmp_path / "rules.yml", rule_file(load_config().test_settings()))
    assert promtool("check", "rules", str(rules)).returncode == 0


# -- Grafana file provisioning ------------------------------------------------------


def test_alerting_file_structure() -> None:
    config = load_config()
    document = load_yaml(GRAFANA_RULES)
    assert document["apiVersion"] == 1
    [group] = document["groups"]
    assert {"orgId", "name", "folder", "interval", "rules"} <= set(group)
    assert group["folder"] == config.grafana_folder
    interval = seconds(group["interval"])
    assert interval % 10 == 0 and interval > 0
    titles = [rule["title"] for rule in group["rules"]]
    uids = [rule["uid"] for rule in group["rules"]]
    assert len(set(titles)) == len(titles) and len(set(uids)) == len(uids)
    for rule in group["rules"]:
        assert UID.fullmatch(rule["uid"]), rule["uid"]
        assert seconds(rule["for"]) % interval == 0, rule["title"]


def test_every_rule_is_query_reduce_threshold(grafana_rules: list[dict[str, Any]]) -> None:
    config = load_config()
    for rule in grafana_rules:
        assert rule["condition"] == "C"
        assert rule["noDataState"] in {"NoData", "Alerting", "OK"}
        assert rule["execErrState"] in {"Error", "Alerting", "OK"}
        query, reduce, threshold = rule["data"]
        assert [query["refId"], reduce["refId"], threshold["refId"]] == ["A", "B", "C"]
        assert query["datasourceUid"] == config.datasource_uid
        assert query["model"]["instant"] is True and query["model"]["refId"] == "A"
        assert query["relativeTimeRange"]["from"] > 0
        for node in (reduce, threshold):
            assert node["datasourceUid"] == EXPR_DATASOURCE
            assert node["model"]["datasource"] == {"type": EXPR_DATASOURCE, "uid": EXPR_DATASOURCE}
            assert node["model"]["refId"] == node["refId"]
        assert reduce["model"]["type"] == "reduce" and reduce["model"]["expression"] == "A"
        assert reduce["model"]["reducer"] in REDUCERS
        assert reduce["model"]["settings"]["mode"] in {"dropNN", "replaceNN", ""}
        assert threshold["model"]["type"] == "threshold"
        assert threshold["model"]["expression"] == "B"
        [condition] = threshold["model"]["conditions"]
        assert condition["evaluator"]["type"] in {"gt", "lt", "eq", "ne", "gte", "lte"}
        assert len(condition["evaluator"]["params"]) == 1


def test_models_match_the_query_reduce_and_threshold_definitions(
    grafana_rules: list[dict[str, Any]],
) -> None:
    problems = []
    for rule in grafana_rules:
        query, reduce, threshold = rule["data"]
        problems += errors(query["model"], schema("provisioning", "prometheusQuery"))
        problems += errors(reduce["model"], schema("provisioning", "reduceExpression"))
        problems += errors(threshold["model"], schema("provisioning", "thresholdExpression"))
    assert problems == []


def test_provisioning_files_match_our_schema() -> None:
    files = {
        "alertingFile": GRAFANA_RULES,
        "datasourcesFile": PROVISIONING / "datasources/queue-prometheus.yaml",
        "dashboardProvidersFile": PROVISIONING / "dashboards/queue-dashboards.yaml",
    }
    for definition, path in files.items():
        assert errors(load_yaml(path), schema("provisioning", definition)) == [], path.name
    assert errors(load_yaml(GRAFANA_RULES), schema("provisioning")) == []


def test_annotations_link_runbook_and_dashboard_panel(grafana_rules: list[dict[str, Any]]) -> None:
    config = load_config()
    board = json.loads((ROOT / "dashboards/queue-overview.json").read_text())
    panel_ids = {p["id"] for p in board["panels"]}
    for rule in grafana_rules:
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"]
        assert notes["runbook_url"] == config.runbook_url(rule["title"])
        assert re.fullmatch(r"https?://[^/\s]+/\S+", notes["runbook_url"])
        assert rule["dashboardUid"] == board["uid"] and rule["panelId"] in panel_ids
        assert "$values.B.Value" in notes["summary"] or "$value" not in notes["summary"]


def test_no_env_interpolation_surprises(grafana_rules: list[dict[str, Any]]) -> None:
    # Grafana expands $VAR in provisioning files except in annotations.
    for rule in grafana_rules:
        outside_annotations = {k: v for k, v in rule.items() if k != "annotations"}
        assert "$" not in json.dumps(outside_annotations), rule["title"]


def test_grafana_and_prometheus_carry_the_same_alerts(
    grafana_rules: list[dict[str, Any]], prometheus_rules: list[dict[str, Any]]
) -> None:
    config = load_config()
    specs = alert_specs(config)
    assert [r["title"] for r in grafana_rules] == [s.name for s in specs]
    assert [r["alert"] for r in prometheus_rules] == [s.name for s in specs]
    for spec, graf, prom in zip(specs, grafana_rules, prometheus_rules, strict=True):
        evaluator = graf["data"][2]["model"]["conditions"][0]["evaluator"]
        assert graf["data"][0]["model"]["expr"] == spec.query
        assert (evaluator["type"], evaluator["params"]) == (spec.op, [spec.threshold])
        # The burn-rate alerts: Prometheus reads the recordings, Grafana computes inline
        # (the SLO stories check both give the same answer).
        query = spec.query if spec.slo is None else spec.rule_query
        assert prom["expr"] == spec.expr == f"{query} {spec.condition}"
        assert graf["for"] == prom["for"] == spec.for_
        slo = {} if spec.slo is None else {"slo": spec.slo}
        labels = {"action": spec.action, "severity": spec.severity, **slo}
        assert graf["labels"] == prom["labels"] == labels
        notes = prom["annotations"]
        assert notes["runbook_url"] == graf["annotations"]["runbook_url"]
        assert (
            notes["description"].replace("$value", "$values.B.Value")
            == (graf["annotations"]["description"])
        )


def test_datasource_and_dashboard_provider_wire_it_together() -> None:
    config = load_config()
    [source] = load_yaml(PROVISIONING / "datasources/queue-prometheus.yaml")["datasources"]
    assert source["uid"] == config.datasource_uid and source["type"] == "prometheus"
    assert source["url"] == config.prometheus_url
    [provider] = load_yaml(PROVISIONING / "dashboards/queue-dashboards.yaml")["providers"]
    assert provider["type"] == "file" and provider["folder"] == config.grafana_folder
    assert provider["options"]["path"] == config.grafana_dashboards_path


def test_the_issue_alerts_exist_with_their_thresholds() -> None:
    specs = {spec.name: spec for spec in alert_specs(load_config())}
    depth = specs["QueueDepthHigh"]
    assert (depth.op, depth.threshold, depth.for_, depth.action) == ("gt", 100, "5m", "scale-up")
    idle = specs["QueueIdle"]
    assert (idle.op, idle.threshold, idle.for_, idle.action) == ("lt", 1, "0s", "scale-down")
    assert "jobs_enqueued_total" in idle.expr and "jobs_in_progress" in idle.expr
    # Idle for 10 minutes is the query's range (no `for` on top), as the summary says.
    assert "[10m]" in idle.expr and "[5m]" not in idle.expr and "idle for 10m" in idle.summary
    assert (specs["DeadLetterDepthHigh"].op, specs["DeadLetterDepthHigh"].threshold) == ("gt", 10)
    assert "histogram_quantile(0.95," in specs["JobLatencyP95AboveSLO"].query
    assert load_config().default_latency_slo == load_config().job_ttl_seconds * 0.5
    for name in ("QueueExporterDown", "QueueExporterAbsent", "QueueRedisUnreachable"):
        assert specs[name].severity == "critical"
    assert "queue_exporter_redis_up" in specs["QueueRedisUnreachable"].expr
    assert "absent(up{" in specs["QueueExporterAbsent"].expr
    assert "active_workers" in specs["QueueNoActiveWorkers"].expr
    assert "jobs_failed_total" in specs["JobFailureRatioHigh"].expr
    assert "oldest_job_age_seconds" in specs["OldestJobOlderThanTTL"].expr
