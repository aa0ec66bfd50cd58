"""The generated dashboards: our JSON schema, the dashboard linter's rules, coverage."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from platform_common.jobs.dashboard_ids import (
    PANEL_TITLES,
    QUEUE_OVERVIEW_TITLE,
    QUEUE_OVERVIEW_UID,
)
from platform_common.jobs.dashboard_ids import QueueOverviewPanel as P
from platform_common.jobs.metric_catalogue import CATALOGUE, Metric, by_key
from platform_common.jobs_monitoring import queries as q
from platform_common.jobs_monitoring.dashboards.encode import render
from platform_common.jobs_monitoring.dashboards.queue_overview import queue_overview
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.slo import ALERT_WINDOWS
from platform_common.jobs_monitoring.spec import alert_specs
from tests.monitoring.schema_check import errors, schema

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_FILES = sorted((ROOT / "dashboards").glob("*.json"))
MODERN_PANELS = {"timeseries", "stat", "heatmap", "row"}
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^{}]*)\}")
RANGE_FUNCTION = re.compile(r"\b(rate|irate|increase)\(([^()]*?)\[([^\]]+)\]\)")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def exprs(board: dict[str, Any]) -> list[tuple[int, str]]:
    """(panel id, PromQL) of every target of every panel."""
    return [(p["id"], t["expr"]) for p in panels(board) for t in p.get("targets", [])]


def counter_series(namespace: str = "") -> set[str]:
    """Series names that only make sense inside rate()/increase()."""
    names = set()
    for metric in CATALOGUE:
        full = metric.full_name(namespace)
        if metric.type == "counter":
            names.add(full)
        elif metric.type == "histogram":
            names |= {f"{full}_bucket", f"{full}_count", f"{full}_sum"}
    return names


@pytest.fixture(scope="module", params=[p.name for p in DASHBOARD_FILES])
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(ROOT / "dashboards" / request.param)


def test_there_is_a_dashboard_file_and_it_is_the_generated_one() -> None:
    assert [p.name for p in DASHBOARD_FILES] == ["queue-overview.json"]
    committed = DASHBOARD_FILES[0].read_text()
    assert committed == render(queue_overview(load_config()))


# -- our schema, from Grafana's documentation ---------------------------------------


def test_dashboard_matches_our_schema(board: dict[str, Any]) -> None:
    assert errors(board, schema("dashboard")) == []


def test_every_panel_matches_its_type_definition(board: dict[str, Any]) -> None:
    # The whole-board check dispatches on `type`; this names the definition each used.
    problems = []
    for panel in panels(board):
        found = errors(panel, schema("dashboard", f"{panel['type']}Panel"))
        problems += [f"{panel['id']} {e}" for e in found]
    assert problems == []
    assert {panel["type"] for panel in panels(board)} == MODERN_PANELS


def test_targets_match_the_prometheus_query_definition(board: dict[str, Any]) -> None:
    query_schema = schema("dashboard", "target")
    problems = [
        f"{panel['id']}/{target['refId']}: {e}"
        for panel in panels(board)
        for target in panel.get("targets", [])
        for e in errors(target, query_schema)
    ]
    assert problems == []


def test_units_are_grafana_units(board: dict[str, Any]) -> None:
    known = set(schema("dashboard")["$defs"]["unit"]["enum"])
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["fieldConfig"]["defaults"]["unit"] in known, panel["id"]
        if panel["type"] == "heatmap":
            assert panel["options"]["yAxis"]["unit"] in known


# -- the dashboard linter's rules -------------------------------------------------


def test_structure_ids_grid_and_modern_panels(board: dict[str, Any]) -> None:
    assert board["uid"] == QUEUE_OVERVIEW_UID and 8 <= len(board["uid"]) <= 40
    assert board["schemaVersion"] >= 39
    assert board["tags"] and board["title"] and board["description"]
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        assert panel["type"] in MODERN_PANELS, panel["type"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["w"] > 0 and grid["h"] > 0
        ref_ids = [target["refId"] for target in panel.get("targets", [])]
        assert len(ref_ids) == len(set(ref_ids))


def test_no_two_panels_overlap(board: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], int] = {}
    for panel in panels(board):
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['id']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["id"]


def test_template_variables(board: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "instance", "agent_type"]
    datasources = [v for v in variables.values() if v["type"] == "datasource"]
    assert len(datasources) == 1
    assert datasources[0]["label"] == "Data source" and datasources[0]["query"] == "prometheus"
    for name in ("job", "instance", "agent_type"):
        variable = variables[name]
        assert variable["type"] == "query"
        assert variable["multi"] is True and variable["includeAll"] is True
        assert variable["allValue"] == ".+"
        assert variable["refresh"] == 2
        assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_panel_has_title_description_unit_datasource_and_targets(
    board: dict[str, Any],
) -> None:
    for panel in panels(board):
        assert panel.get("title"), panel["id"]
        if panel["type"] == "row":
            continue
        assert panel.get("description"), panel["id"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["id"]
        assert panel["targets"], panel["id"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]


def test_every_selector_filters_job_and_instance(board: dict[str, Any]) -> None:
    for panel_id, expr in exprs(board):
        selectors = SELECTOR.findall(expr)
        assert selectors, (panel_id, expr)
        for name, matchers in selectors:
            assert 'job=~"$job"' in matchers, (panel_id, name)
            assert 'instance=~"$instance"' in matchers, (panel_id, name)
            metric = metric_of(name)
            if metric is not None and "agent_type" in metric.labels:
                assert 'agent_type=~"$agent_type"' in matchers, (panel_id, name)


SERIES = {
    metric.full_name() + suffix: metric
    for metric in CATALOGUE
    for suffix in (("_bucket", "_count", "_sum") if metric.type == "histogram" else ("",))
}


def metric_of(series: str) -> Metric | None:
    """The catalogue metric a series belongs to; None for Prometheus' own `up`."""
    if series == q.PROMETHEUS_UP:
        return None
    return SERIES[series]  # KeyError: a series name the catalogue does not know


def _slo_panel_ids() -> set[int]:
    """The SLO row's panels and the burn-rate alerts' stats: their windows are the SLOs'."""
    specs = alert_specs(load_config())
    stats = {int(P.ALERT_STATS) + index for index, spec in enumerate(specs) if spec.slo}
    return stats | {int(panel) for panel in P if panel.name.startswith("SLO_")}


def test_rates_use_rate_interval_and_counters_only_inside_rates(board: dict[str, Any]) -> None:
    counters = counter_series()
    config = load_config()
    # QueueIdle's range is its idle time, not a rate window: its stat shows the alert's value.
    idle_stat = int(P.ALERT_STATS) + [s.name for s in alert_specs(config)].index("QueueIdle")
    slo_windows = {*ALERT_WINDOWS, config.slo_availability.window, config.slo_latency.window}
    slo_panels = _slo_panel_ids()
    for panel_id, expr in exprs(board):
        for _function, _series, window in RANGE_FUNCTION.findall(expr):
            if panel_id in slo_panels:
                assert window in slo_windows, (panel_id, expr)
            else:
                expected = config.queue_idle_for if panel_id == idle_stat else "$__rate_interval"
                assert window == expected, (panel_id, expr)
        for name, _ in SELECTOR.findall(expr):
            if name in counters:
                assert re.search(rf"\b(rate|irate|increase)\({name}\{{", expr), (panel_id, name)
                # ...and never anywhere else in the expression.
                bare = re.sub(rf"\b(rate|irate|increase)\({name}\{{", "", expr)
                assert not re.search(rf"\b{name}\{{", bare), (panel_id, expr)


def test_heatmap_is_the_modern_one_over_histogram_buckets(board: dict[str, Any]) -> None:
    [heat] = [p for p in panels(board) if p["type"] == "heatmap"]
    assert heat["options"]["calculate"] is False
    assert heat["options"]["yAxis"]["unit"] == by_key("latency").unit
    [target] = heat["targets"]
    assert target["format"] == "heatmap" and target["legendFormat"] == "{{le}}"
    assert "job_latency_seconds_bucket" in target["expr"] and "by (le)" in target["expr"]


# -- what the dashboard must show ------------------------------------

REQUIRED = {
    P.QUEUE_DEPTH: {"queue_depth"},
    P.THROUGHPUT: {"jobs_enqueued_total", "jobs_completed_total", "jobs_failed_total"},
    P.LATENCY_HEATMAP: {"job_latency_seconds_bucket"},
    P.LATENCY_QUANTILES: {"job_latency_seconds_bucket"},
    P.DEAD_LETTER_DEPTH: {"dead_letter_depth"},
    P.RETRIES: {"jobs_retried_total"},
    P.ACTIVE_WORKERS: {"active_workers"},
    P.OLDEST_JOB_AGE: {"oldest_job_age_seconds"},
    P.EXPORTER_UP: {"up", "queue_exporter_redis_up"},
}


def test_required_panels_show_the_required_series(board: dict[str, Any]) -> None:
    by_id = {panel["id"]: panel for panel in panels(board)}
    for panel_id, series in REQUIRED.items():
        shown = {
            name for _, e in exprs({"panels": [by_id[panel_id]]}) for name, _ in SELECTOR.findall(e)
        }
        assert series <= shown, (panel_id.name, shown)
    quantiles = " ".join(t["expr"] for t in by_id[P.LATENCY_QUANTILES]["targets"])
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}," in quantiles


def test_the_latency_panels_say_where_a_jobs_trace_and_logs_are(board: dict[str, Any]) -> None:
    by_id = {panel["id"]: panel for panel in panels(board)}
    for panel_id in (P.LATENCY_HEATMAP, P.LATENCY_QUANTILES, P.WAIT_AND_RUN):
        description = by_id[panel_id]["description"]
        assert "messaging.message.id = <job id>" in description, panel_id.name
        assert "trace_id" in description, panel_id.name


def test_every_catalogue_metric_is_on_the_dashboard(board: dict[str, Any]) -> None:
    shown = {name for _, expr in exprs(board) for name, _ in SELECTOR.findall(expr)}
    for metric in CATALOGUE:
        suffix = "_bucket" if metric.type == "histogram" else ""
        assert metric.full_name() + suffix in shown, metric.key


def test_panel_titles_are_the_ones_runbooks_name(board: dict[str, Any]) -> None:
    by_id = {panel["id"]: panel for panel in panels(board)}
    assert board["title"] == QUEUE_OVERVIEW_TITLE
    for panel_id, title in PANEL_TITLES.items():
        assert by_id[int(panel_id)]["title"] == title, panel_id.name
    alert_stats = {i for i in by_id if i >= P.ALERT_STATS}
    assert set(by_id) - alert_stats == {int(panel_id) for panel_id in PANEL_TITLES}


def test_alert_row_shows_each_alert_with_its_threshold_and_runbook(board: dict[str, Any]) -> None:
    config = load_config()
    by_id = {panel["id"]: panel for panel in panels(board)}
    for index, spec in enumerate(alert_specs(config)):
        stat = by_id[int(P.ALERT_STATS) + index]
        assert stat["type"] == "stat" and stat["title"] == spec.name
        steps = [s["value"] for s in stat["fieldConfig"]["defaults"]["thresholds"]["steps"]]
        assert spec.threshold in steps
        assert config.runbook_url(spec.name) in [link["url"] for link in stat["links"]]
        # ...and the panel the alert links to exists.
        assert int(spec.panel) in by_id
