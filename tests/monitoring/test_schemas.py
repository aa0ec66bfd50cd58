"""Our schemas reject what Grafana rejects: each mutation of a committed file is an error
at the field Grafana's documentation rules on, and the unmutated files are valid."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from platform_common.jobs_monitoring import outputs
from tests.monitoring.schema_check import SCHEMAS, errors, schema

ROOT = Path(__file__).resolve().parents[2]
Mutation = Callable[[Any], object]


def dashboard() -> Any:
    return json.loads((ROOT / outputs.DASHBOARD_FILE).read_text())


def alerting() -> Any:
    return yaml.safe_load((ROOT / outputs.GRAFANA_ALERT_RULES).read_text())


def panel_of_type(board: Any, kind: str) -> Any:
    return next(p for p in board["panels"] if p["type"] == kind)


def first_rule(document: Any) -> Any:
    return document["groups"][0]["rules"][0]


def rejected(document: Any, against: dict[str, Any], mutate: Mutation) -> list[str]:
    changed = copy.deepcopy(document)
    mutate(changed)
    return errors(changed, against)


def test_schemas_are_valid_2020_12_schemas() -> None:
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_the_committed_files_are_valid() -> None:
    assert errors(dashboard(), schema("dashboard")) == []
    assert errors(alerting(), schema("provisioning")) == []


# -- dashboards ---------------------------------------------------------------------


def _set(path: list[Any], value: Any) -> Mutation:
    def mutate(document: Any) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _on_panel(kind: str, change: Callable[[Any], object]) -> Mutation:
    return lambda board: change(panel_of_type(board, kind))


DASHBOARD_MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "removed panel type graph": (_on_panel("timeseries", lambda p: p.update(type="graph")),
                                 "'graph' is not one of"),
    "removed panel type singlestat": (_on_panel("stat", lambda p: p.update(type="singlestat")),
                                      "'singlestat' is not one of"),
    "missing uid": (lambda b: b.pop("uid"), "'uid' is a required property"),
    "uid over 40 characters": (_set(["uid"], "q" * 41), "does not match"),
    "uid with a dot": (_set(["uid"], "queue.overview"), "does not match"),
    "old schemaVersion": (_set(["schemaVersion"], 16), "less than the minimum"),
    "panel past column 24": (
        _on_panel("timeseries", lambda p: p["gridPos"].update(x=20, w=12)),
        "is not valid under any of the given schemas",
    ),
    "unknown unit": (
        _on_panel("timeseries", lambda p: p["fieldConfig"]["defaults"].update(unit="seconds")),
        "'seconds' is not one of",
    ),
    "legacy span key": (_on_panel("stat", lambda p: p.update(span=4)),
                        "Additional properties are not allowed ('span'"),
    "panel without targets": (_on_panel("stat", lambda p: p.update(targets=[])),
                              "should be non-empty"),
    "first threshold step with a value": (
        _on_panel("stat", lambda p: p["fieldConfig"]["defaults"]["thresholds"]["steps"][0]
                  .update(value=0)),
        "0 is not of type 'null'",
    ),
    "heatmap re-bucketing flag as text": (
        _on_panel("heatmap", lambda p: p["options"].update(calculate="false")),
        "is not of type 'boolean'",
    ),
    "panel datasource not the variable": (
        _on_panel("timeseries", lambda p: p["datasource"].update(uid="queue-prometheus")),
        "'${datasource}' was expected",
    ),
    "variable never refreshed": (_set(["templating", "list", 1, "refresh"], 0),
                                 "0 is not one of [1, 2]"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(DASHBOARD_MUTATIONS))
def test_dashboard_schema_rejects(name: str) -> None:
    mutate, message = DASHBOARD_MUTATIONS[name]
    problems = rejected(dashboard(), schema("dashboard"), mutate)
    assert any(message in problem for problem in problems), problems


# -- alert provisioning -------------------------------------------------------------


def _on_rule(change: Callable[[Any], object]) -> Mutation:
    return lambda document: change(first_rule(document))


def _on_node(index: int, change: Callable[[Any], object]) -> Mutation:
    return _on_rule(lambda rule: change(rule["data"][index]["model"]))


def _ruler_api_shape(document: Any) -> None:
    # What grafanalib's AlertRulev9 writes: the HTTP API's nesting, not file provisioning.
    rules = document["groups"][0]["rules"]
    rules[0] = {"for": rules[0]["for"], "grafana_alert": {"title": rules[0]["title"]}}


ALERTING_MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "reduce mode strict": (_on_node(1, lambda m: m["settings"].update(mode="strict")),
                           "'strict' is not one of ['dropNN', 'replaceNN', '']"),
    "unknown reducer": (_on_node(1, lambda m: m.update(reducer="avg")), "'avg' is not one of"),
    "two threshold conditions": (
        _on_node(2, lambda m: m["conditions"].append(copy.deepcopy(m["conditions"][0]))),
        "is too long",
    ),
    "gt with two params": (
        _on_node(2, lambda m: m["conditions"][0]["evaluator"].update(params=[1, 2])),
        "is too long",
    ),
    "missing rule uid": (_on_rule(lambda r: r.pop("uid")), "'uid' is a required property"),
    "rule uid over 40 characters": (_on_rule(lambda r: r.update(uid="x" * 41)), "does not match"),
    "noDataState with a space": (_on_rule(lambda r: r.update(noDataState="No Data")),
                                 "'No Data' is not one of"),
    "dashboardUid without panelId": (_on_rule(lambda r: r.pop("panelId")),
                                     "'panelId' is a dependency of 'dashboardUid'"),
    "expression node on a datasource": (
        _on_rule(lambda r: r["data"][1].update(datasourceUid="queue-prometheus")),
        "Additional properties are not allowed",
    ),
    "group without folder": (lambda d: d["groups"][0].pop("folder"),
                             "'folder' is a required property"),
    "interval not a multiple of 10s": (_set(["groups", 0, "interval"], "15s"), "does not match"),
    "apiVersion 2": (_set(["apiVersion"], 2), "1 was expected"),
    "ruler API shape": (_ruler_api_shape, "'uid' is a required property"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ALERTING_MUTATIONS))
def test_provisioning_schema_rejects(name: str) -> None:
    mutate, message = ALERTING_MUTATIONS[name]
    problems = rejected(alerting(), schema("provisioning"), mutate)
    assert any(message in problem for problem in problems), problems


def test_datasource_and_provider_files_reject_other_types() -> None:
    provisioning = ROOT / outputs.GRAFANA_PROVISIONING
    source = yaml.safe_load((provisioning / "datasources/queue-prometheus.yaml").read_text())
    provider = yaml.safe_load((provisioning / "dashboards/queue-dashboards.yaml").read_text())
    source["datasources"][0]["type"] = "loki"
    provider["providers"][0]["type"] = "folder"
    assert errors(source, schema("provisioning", "datasourcesFile"))
    assert errors(provider, schema("provisioning", "dashboardProvidersFile"))
