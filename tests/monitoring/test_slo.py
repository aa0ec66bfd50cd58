"""The SLOs' rules: recordings of every SLI over every window the alerts read, the SRE
workbook's multi-window, multi-burn-rate alerts in Prometheus and Grafana, and promtool
stories that prove the math (each pair just above and just below its factor, a short
outage that must not page, a slow burn that must open a ticket); each story is shown to
catch a rule that gets the math wrong."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs.dashboard_ids import QueueOverviewPanel as P
from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs_exporter import collector
from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.alerts.grafana_provisioning import (
    EXEMPLAR_TRACE_ID,
    datasource,
)
from platform_common.jobs_monitoring.alerts.prometheus_rules import (
    SLO_GROUP_NAME,
    rule_file,
    slo_promtool_tests,
)
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.dashboards.encode import render
from platform_common.jobs_monitoring.dashboards.queue_overview import queue_overview
from platform_common.jobs_monitoring.generate import bundle
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.slo import ALERT_WINDOWS, BURN_RATE_PAIRS, SloOverride
from platform_common.jobs_monitoring.slo import ObjectiveOverride as Change
from platform_common.jobs_monitoring.slo_queries import recording_rules, sli_error
from platform_common.jobs_monitoring.spec import alert_specs
from tests.monitoring.schema_check import errors, schema
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
SLO_TESTS = ROOT / outputs.PROMETHEUS_SLO_RULE_TESTS
SLO_ALERTS = {
    "JobAvailabilityBudgetBurnFast": ("availability", "critical"),
    "JobAvailabilityBudgetBurnSlow": ("availability", "warning"),
    "JobLatencyBudgetBurnFast": ("latency", "critical"),
    "JobLatencyBudgetBurnSlow": ("latency", "warning"),
}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def _write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=True, width=10**6))
    return path


def _stories(config: MonitoringConfig, keep: Callable[[str], bool]) -> dict[str, Any]:
    document = slo_promtool_tests(config, "rules.yml")
    document["tests"] = [test for test in document["tests"] if keep(test["name"])]
    assert document["tests"]
    return document


def _promtool(tmp_path: Path, rules: dict[str, Any], stories: dict[str, Any]) -> str:
    """promtool on `stories` against `rules`: "" when every check holds, else its report."""
    _write(tmp_path / "rules.yml", rules)
    result = promtool("test", "rules", str(_write(tmp_path / "tests.yml", stories)))
    return "" if result.returncode == 0 else result.stdout + result.stderr


# -- the workbook's table, recorded and alerted --------------------------------------


def test_the_pairs_are_the_workbooks() -> None:
    table = [(p.severity, p.factor, p.long, p.short) for p in BURN_RATE_PAIRS]
    assert table == [
        ("page", 14.4, "1h", "5m"),
        ("page", 6, "6h", "30m"),
        ("ticket", 3, "1d", "2h"),
        ("ticket", 1, "3d", "6h"),
    ]
    assert set(ALERT_WINDOWS) == {w for p in BURN_RATE_PAIRS for w in (p.long, p.short)}


def test_every_sli_is_recorded_over_every_window_with_sloth_names() -> None:
    config = load_config()
    records = recording_rules(config)
    for kind in ("availability", "latency"):
        names = [rule.record for rule in records if rule.slo == kind]
        windows = [*ALERT_WINDOWS, config.slo_default(kind).window]
        assert {sli_error(window) for window in windows} <= set(names)
        assert {
            "slo:objective:ratio",
            "slo:error_budget:ratio",
            "slo:time_period:days",
            "slo:current_burn_rate:ratio",
            "slo:period_burn_rate:ratio",
            "slo:period_error_budget_remaining:ratio",
        } <= set(names)
        assert len(names) == len(set(names))  # one rule per name and SLO
    document = rule_file(config)
    [group] = [g for g in document["groups"] if g["name"] == SLO_GROUP_NAME]
    for rule in group["rules"]:
        assert re.fullmatch(r"slo:[a-z_]+:[a-z_]+(rate\w+)?", rule["record"]), rule["record"]
        assert set(rule["labels"]) == {"slo"}
        # Exporter replicas are deduplicated as every other query: max, never sum.
        assert "sum" not in rule["expr"]


def test_availability_counts_failures_once_and_latency_reads_its_threshold_bucket() -> None:
    config = load_config()
    records = {(r.record, r.slo): r.expr for r in recording_rules(config)}
    availability = records[(sli_error("1h"), "availability")]
    assert "jobs_failed_total" in availability and "jobs_expired_total" in availability
    assert "jobs_completed_total" in availability
    # failed already counts every dead-lettered job.
    assert "jobs_dead_lettered_total" not in availability
    latency = records[(sli_error("1h"), "latency")]
    assert 'job_latency_seconds_bucket{job="queue-exporter", le="30.0"}' in latency
    assert "job_latency_seconds_count" in latency


def test_each_slo_has_a_page_and_a_ticket_alert_in_both_systems() -> None:
    config = load_config()
    specs = {spec.name: spec for spec in alert_specs(config) if spec.slo is not None}
    assert {name: (s.slo, s.severity) for name, s in specs.items()} == SLO_ALERTS
    grafana = yaml.safe_load((ROOT / outputs.GRAFANA_ALERT_RULES).read_text())
    prometheus = yaml.safe_load((ROOT / outputs.PROMETHEUS_RULES).read_text())
    titles = {rule["title"] for group in grafana["groups"] for rule in group["rules"]}
    alerts = {r.get("alert") for group in prometheus["groups"] for r in group["rules"]}
    assert set(SLO_ALERTS) <= titles and set(SLO_ALERTS) <= alerts
    for name, spec in specs.items():
        assert spec.rule_query is not None
        factors = [p for p in BURN_RATE_PAIRS if (p.severity == "page") == name.endswith("Fast")]
        for pair in factors:
            # Prometheus reads the recordings; Grafana cannot count on them: inline.
            assert f"{sli_error(pair.short)}{{" in spec.rule_query
            assert f"{sli_error(pair.long)}{{" in spec.rule_query
            assert f"[{pair.short}]" in spec.query and f"[{pair.long}]" in spec.query
            assert f"> {pair.factor:g} and" in spec.query
        assert "slo:" not in spec.query


def test_the_runbooks_explain_the_budget_and_name_their_pairs() -> None:
    for name in SLO_ALERTS:
        page = (ROOT / outputs.RUNBOOKS_DIR / f"{name}.md").read_text()
        assert "**The error budget**" in page and "**burn rate**" in page
        assert "| page (this alert) | 14.4x | 1h | 5m |" in page or not name.endswith("Fast")
        assert "| ticket (this alert) | 1x | 3d | 6h |" in page or name.endswith("Fast")
        assert "slo:period_error_budget_remaining:ratio" in page


# -- the stories -------------------------------------------------------------------------


def test_every_alert_has_each_pair_above_and_below_and_its_own_story() -> None:
    document = yaml.safe_load(SLO_TESTS.read_text())
    names = [test["name"] for test in document["tests"]]
    for name in SLO_ALERTS:
        fast = name.endswith("Fast")
        for pair in BURN_RATE_PAIRS:
            if (pair.severity == "page") != fast:
                continue
            assert f"{name}: {pair.factor:g}x pair, just above" in names
            assert f"{name}: {pair.factor:g}x pair, just below" in names
        story = "a short outage must not page" if fast else "a slow burn must open a ticket"
        assert f"{name}: {story}" in names
    by_name = {test["name"]: test for test in document["tests"]}

    def fires(story: str) -> list[bool]:
        return [bool(check["exp_alerts"]) for check in by_name[story]["alert_rule_test"]]

    for name in SLO_ALERTS:
        for pair in BURN_RATE_PAIRS:
            if (pair.severity == "page") == name.endswith("Fast"):
                assert True in fires(f"{name}: {pair.factor:g}x pair, just above")
                assert True not in fires(f"{name}: {pair.factor:g}x pair, just below")
        if name.endswith("Fast"):
            assert True not in fires(f"{name}: a short outage must not page")
            assert fires(f"{name}: the page stops once the errors do") == [True, False, False]
        else:
            assert fires(f"{name}: a slow burn must open a ticket")[-2:] == [True, True]


@needs_promtool
@pytest.mark.slow
def test_the_committed_stories_pass() -> None:
    result = promtool("test", "rules", str(SLO_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _mutated(config: MonitoringConfig, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    rules = rule_file(config)
    for group in rules["groups"]:
        for rule in group["rules"]:
            change(rule)
    return rules


def _in_alert(name: str, old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(rule: dict[str, Any]) -> None:
        if rule.get("alert") == name:
            assert old in rule["expr"], (name, old)
            rule["expr"] = rule["expr"].replace(old, new)

    return change


def _in_record(slo: str, old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(rule: dict[str, Any]) -> None:
        if rule.get("record", "").startswith("slo:sli_error:") and rule["labels"]["slo"] == slo:
            rule["expr"] = rule["expr"].replace(old, new)

    return change


def _without_long_window(rule: dict[str, Any]) -> None:
    if rule.get("alert") == "JobAvailabilityBudgetBurnFast":
        long = re.escape(sli_error("1h"))
        rule["expr"] = re.sub(rf" and {long}\{{[^}}]*\}} / [^>]*> 14.4", "", rule["expr"])
        assert sli_error("1h") not in rule["expr"]


@needs_promtool
@pytest.mark.parametrize(
    ("story", "change"),
    [
        # A page factor lowered: the burn just below 14.4x pages.
        ("JobAvailabilityBudgetBurnFast: 14.4x pair, just below",
         _in_alert("JobAvailabilityBudgetBurnFast", "> 14.4", "> 13")),
        ("JobAvailabilityBudgetBurnFast: 6x pair, just above",
         _in_alert("JobAvailabilityBudgetBurnFast", "> 6", "> 7")),
        # Only the short window: the short outage pages.
        ("JobAvailabilityBudgetBurnFast: a short outage must not page", _without_long_window),
        # Dead letters counted on top of the failures they are part of.
        ("JobAvailabilityBudgetBurnFast: 14.4x pair, just below",
         _in_record("availability", "jobs_expired_total", "jobs_dead_lettered_total")),
        # Expired jobs not counted as errors: the burn is lower than the story's.
        ("JobAvailabilityBudgetBurnFast: 14.4x pair, just above",
         _in_record("availability", "jobs_expired_total", "jobs_retried_total")),
        # The latency SLI reading the next bucket up: nothing is slow.
        ("JobLatencyBudgetBurnFast: 14.4x pair, just above",
         _in_record("latency", 'le="30.0"', 'le="60.0"')),
        # The reset: a rule that keeps paging on the long window alone.
        ("JobLatencyBudgetBurnFast: the page stops once the errors do",
         _in_alert("JobLatencyBudgetBurnFast", "ratio_rate5m", "ratio_rate1h")),
    ],
)  # fmt: skip
def test_the_page_stories_catch_wrong_math(
    tmp_path: Path, story: str, change: Callable[[dict[str, Any]], None]
) -> None:
    config = load_config()
    stories = _stories(config, lambda name: name == story)
    assert _promtool(tmp_path, rule_file(config), stories) == ""
    assert _promtool(tmp_path, _mutated(config, change), stories) != ""


@needs_promtool
@pytest.mark.slow
@pytest.mark.parametrize(
    ("story", "change"),
    [
        ("JobAvailabilityBudgetBurnSlow: 1x pair, just above",
         _in_alert("JobAvailabilityBudgetBurnSlow", "> 1)", "> 1.1)")),
        ("JobAvailabilityBudgetBurnSlow: 3x pair, just below",
         _in_alert("JobAvailabilityBudgetBurnSlow", "> 3", "> 2.5")),
        # The slow burn's ticket needs the 3d pair: without it, no ticket at all.
        ("JobAvailabilityBudgetBurnSlow: a slow burn must open a ticket",
         _in_alert("JobAvailabilityBudgetBurnSlow", "> 1)", "> 5)")),
    ],
)  # fmt: skip
def test_the_ticket_stories_catch_wrong_math(
    tmp_path: Path, story: str, change: Callable[[dict[str, Any]], None]
) -> None:
    config = load_config()
    stories = _stories(config, lambda name: name == story)
    assert _promtool(tmp_path, _mutated(config, change), stories) != ""


@needs_promtool
def test_an_agent_types_own_objective_is_what_its_rules_use(tmp_path: Path) -> None:
    # The stories' agent type gets a stricter availability target and a longer latency
    # threshold: its stories pass against its own rules, and fail against the defaults'.
    config = replace(
        load_config(),
        slo_overrides={
            "dining": SloOverride(
                availability=Change(target=0.999), latency=Change(threshold_seconds=60.0)
            ),
            "flights": SloOverride(availability=Change(target=0.995, window="4w")),
        },
    )
    stories = _stories(config, lambda name: name.endswith("14.4x pair, just above"))
    assert _promtool(tmp_path, rule_file(config), stories) == ""
    assert _promtool(tmp_path, rule_file(load_config()), stories) != ""
    expr = {r.record + r.slo: r.expr for r in recording_rules(config)}
    objective = expr["slo:objective:ratioavailability"]
    assert 'agent_type!~"dining|flights"}) * 0.99 or' in objective
    assert 'agent_type=~"dining"' in objective and "* 0.999" in objective
    # flights counts its budget over 4w: a period of its own.
    assert 'agent_type=~"flights"' in expr[f"{sli_error('4w')}availability"]
    assert 'agent_type!~"flights"' in expr[f"{sli_error('28d')}availability"]


# -- switching threshold alerts off --------------------------------------------------------


def test_a_site_switches_off_the_threshold_alerts_an_slo_covers(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("alerts_off: [JobFailureRatioHigh, JobLatencyP95AboveSLO]\n")
    config = load_config(site)
    files = bundle(config)
    names = {spec.name for spec in alert_specs(config)}
    assert not names & {"JobFailureRatioHigh", "JobLatencyP95AboveSLO"}
    assert set(SLO_ALERTS) <= names
    for path in (outputs.PROMETHEUS_RULES, outputs.GRAFANA_ALERT_RULES, outputs.DASHBOARD_FILE):
        assert "JobFailureRatioHigh" not in files[path], path
    assert f"{outputs.RUNBOOKS_DIR}/JobFailureRatioHigh.md" not in files
    assert "JobFailureRatioHigh" not in files[outputs.PROMETHEUS_RULE_TESTS]


def test_switching_off_an_alert_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("alerts_off: [JobFailureRatioHihg]\n")
    with pytest.raises(ConfigurationError) as caught:
        load_config(site)
    assert caught.value.setting == "alerts_off"
    assert "JobFailureRatioHihg" in caught.value.problem and str(site) in caught.value.problem


# -- the dashboard -------------------------------------------------------------------------


def _slo_panels(config: MonitoringConfig) -> dict[int, dict[str, Any]]:
    board = json.loads(render(queue_overview(config)))
    return {panel["id"]: panel for panel in board["panels"] if P.ROW_SLO <= panel["id"] < 80}


@pytest.mark.parametrize(
    ("kind", "sli", "budget", "burn"),
    [
        ("availability", P.SLO_AVAILABILITY, P.SLO_AVAILABILITY_BUDGET, P.SLO_AVAILABILITY_BURN),
        ("latency", P.SLO_LATENCY, P.SLO_LATENCY_BUDGET, P.SLO_LATENCY_BURN),
    ],
)
def test_the_dashboard_shows_each_types_sli_budget_and_burn_against_its_objective(
    kind: str, sli: P, budget: P, burn: P
) -> None:
    config = replace(
        load_config(),
        slo_overrides={"dining": SloOverride(Change(target=0.995), Change(target=0.97))},
    )
    panels = _slo_panels(config)
    assert panels[P.ROW_SLO]["type"] == "row"
    target = config.slo_default(kind).target  # type: ignore[arg-type]
    own = 0.995 if kind == "availability" else 0.97
    # The SLI now, per agent type, with each type's objective drawn beside it.
    line, objective = panels[sli]["targets"]
    assert line["expr"].startswith("1 - ") and "[1h]" in line["expr"]
    assert line["legendFormat"] == "{{agent_type}} SLI (1h)"
    assert f"* {target:g}" in objective["expr"] and f"* {own:g}" in objective["expr"]
    assert 'agent_type=~"dining"' in objective["expr"]
    steps = panels[sli]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert target in [step["value"] for step in steps]  # dashed: the default objective
    # The budget left in each type's window: the value now.
    [left] = panels[budget]["targets"]
    assert panels[budget]["type"] == "stat" and left["instant"] is True
    assert f"[{config.slo_default(kind).window}]" in left["expr"]  # type: ignore[arg-type]
    # The burn rate over time, the objective (1x) and the page factors drawn.
    windows = [t["legendFormat"] for t in panels[burn]["targets"]]
    assert windows == ["{{agent_type}} 5m", "{{agent_type}} 1h", "{{agent_type}} 6h"]
    lines = [s["value"] for s in panels[burn]["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert lines == [None, 1, 3, 6, 14.4]
    assert panels[burn]["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    # The burn-rate alerts link the burn panel.
    for spec in alert_specs(config):
        if spec.slo == kind:
            assert spec.panel == burn


# -- exemplars: from a latency panel to a job's trace -----------------------------------


def test_the_latency_panels_draw_exemplars() -> None:
    board = json.loads(render(queue_overview(load_config())))
    by_id = {panel["id"]: panel for panel in board["panels"]}
    for panel in (P.LATENCY_HEATMAP, P.LATENCY_QUANTILES, P.WAIT_AND_RUN):
        targets = by_id[panel]["targets"]
        assert targets and all(target["exemplar"] is True for target in targets), panel.name
        assert "Exemplars" in by_id[panel]["description"]
    # Only they: the other panels' series have no exemplars to fetch.
    others = [t for p in board["panels"] for t in p.get("targets", []) if "exemplar" in t]
    latency = (P.LATENCY_HEATMAP, P.LATENCY_QUANTILES, P.WAIT_AND_RUN)
    assert len(others) == sum(len(by_id[p]["targets"]) for p in latency)


def test_the_site_sets_where_an_exemplars_trace_opens(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("trace_url: http://jaeger:16686/trace/{trace_id}\n")
    config = load_config(site)
    [source] = datasource(config)["datasources"]
    assert source["jsonData"]["exemplarTraceIdDestinations"] == [
        # `$$`: file provisioning would read `${...}` as an environment variable.
        {"name": "trace_id", "url": "http://jaeger:16686/trace/$${__value.raw}"}
    ]
    assert errors(datasource(config), schema("provisioning", "datasourcesFile")) == []
    # The label is the one the exporter writes.
    assert EXEMPLAR_TRACE_ID == collector.EXEMPLAR_TRACE_ID
    [default] = datasource(load_config())["datasources"]
    assert "exemplarTraceIdDestinations" not in default["jsonData"]


@pytest.mark.parametrize(
    "url",
    ["jaeger:16686/trace/{trace_id}", "http://jaeger:16686/trace/", "http://x/{trace_id}/$HOME",
     "http://x/{trace_id}/{trace_id}"],
)  # fmt: skip
def test_a_trace_url_without_its_place_for_the_id_is_refused(tmp_path: Path, url: str) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f"trace_url: '{url}'\n")
    with pytest.raises(ConfigurationError) as caught:
        load_config(site)
    assert caught.value.setting == "trace_url" and str(site) in caught.value.problem
