"""`agentjobs slo`: each agent type's SLIs, error budget left and burn rate, read from a real
Prometheus that runs the generated rule file, as a table or JSON; one line when it
cannot be read.

The Prometheus gets the exporter's counters by backfill (`promtool tsdb
create-blocks-from openmetrics` before it starts), for the 30 minutes up to now at
constant rates (not beyond: it would refuse the recordings of a time its blocks hold),
and evaluates the generated recording rules every second: the numbers the command shows
are then known exactly, for the minutes the module runs."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs.cli import main
from platform_common.jobs.metric_catalogue import by_key
from platform_common.jobs.operations import slo_status as operations
from platform_common.jobs_monitoring import slo_queries
from platform_common.jobs_monitoring.alerts.prometheus_rules import rule_file
from platform_common.jobs_monitoring.site import load_config
from tests.cli.runner import Ran, one_error_line, run, table_row
from tests.support.prometheus import PrometheusServer, promtool

STEP = 15
"""Seconds between backfilled samples (a scrape interval)."""
PER_STEP = {
    # completed, failed, expired; latency count and within 30 s
    "dining": (195, 4, 1, 195, 156),  # 5 of 200 bad: 2.5%; 39 of 195 slow: 20%
    "flights": (0, 0, 0, 0, 0),  # no traffic: no ratio
}
KEYS = ("completed", "failed", "expired")
START = 1_000_000
"""Every counter's first value (as a long-running exporter's)."""
JOB = "queue-exporter"


def _openmetrics(first: int, last: int) -> str:
    lines = []

    def series(name: str, labels: str, per_step: int) -> None:
        for index, at in enumerate(range(first, last + 1, STEP)):
            lines.append(f"{name}{{{labels}}} {START + index * per_step} {at}")

    for agent_type, steps in PER_STEP.items():
        labels = f'agent_type="{agent_type}",instance="x:9808",job="{JOB}"'
        for key, per_step in zip(KEYS, steps, strict=False):
            series(by_key(key).full_name(), labels, per_step)
        latency = by_key("latency").full_name()
        series(f"{latency}_count", labels, steps[3])
        series(f"{latency}_bucket", f'{labels},le="30.0"', steps[4])
        series(by_key("queue_depth").full_name(), labels, 0)
    # OpenMetrics backfill wants each family's samples together, in time order.
    lines.sort(key=lambda line: (line.split("{", 1)[0], line.split("{", 1)[1].split("}")[0]))
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A Prometheus with the counters around now and the generated rules; the SLO
    recordings evaluated at least once."""
    directory = tmp_path_factory.mktemp("slo")
    now = math.floor(time.time() / STEP) * STEP
    source = directory / "counters.om"
    source.write_text(_openmetrics(now - 30 * 60, now))
    rules = directory / "rules.yml"
    rules.write_text(yaml.safe_dump(rule_file(load_config().test_settings(interval="1s"))))
    server = PrometheusServer(rule_files=[rules])
    try:
        made = promtool(
            "tsdb", "create-blocks-from", "openmetrics", str(source),
            str(server.directory / "data"),
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        server.start()
        server.wait_for(operations.BUDGET_REMAINING, lambda result: len(result) == 4)
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def agentjobs(capsys: pytest.CaptureFixture[str]) -> Any:
    """`agentjobs` in this process without `--redis-url`: `slo` reads Prometheus alone
    (the folder's `agentjobs` would start a Redis for nothing)."""

    def ran(*args: str) -> Ran:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return ran


def test_the_recording_names_are_the_generators() -> None:
    core = (operations.OBJECTIVE, operations.ERROR_BUDGET, operations.TIME_PERIOD,
            operations.CURRENT_BURN, operations.PERIOD_BURN, operations.BUDGET_REMAINING,
            operations.SLI_ERROR_LONG)  # fmt: skip
    generated = (slo_queries.OBJECTIVE, slo_queries.ERROR_BUDGET, slo_queries.TIME_PERIOD,
                 slo_queries.CURRENT_BURN, slo_queries.PERIOD_BURN, slo_queries.BUDGET_REMAINING,
                 slo_queries.sli_error(operations.LONG_WINDOW))  # fmt: skip
    assert core == generated
    recorded = {rule.record for rule in slo_queries.recording_rules(load_config())}
    assert operations.SLI_ERROR_LONG in recorded


def _close(found: float | None, expected: float) -> bool:
    return found is not None and math.isclose(found, expected, rel_tol=1e-9, abs_tol=1e-12)


def test_json_shows_each_types_slis_budget_and_burn(
    agentjobs: Any, prometheus: PrometheusServer
) -> None:
    document = agentjobs("slo", "--prometheus-url", prometheus.url, "-o", "json").json()
    assert document["prometheus"] == prometheus.url
    rows = {(s["agent_type"], s["slo"]): s for s in document["slos"]}
    assert list(rows) == [
        ("dining", "availability"), ("dining", "latency"),
        ("flights", "availability"), ("flights", "latency"),
    ]  # fmt: skip
    dining = rows["dining", "availability"]
    # 5 bad of 200 = 2.5% against a 1% budget: 2.5x, the budget overspent 1.5 times.
    assert (dining["job"], dining["objective"], dining["window_days"]) == (JOB, 0.99, 28)
    assert _close(dining["sli"], 0.975)
    assert _close(dining["burn_rate_1h"], 2.5) and _close(dining["burn_rate_5m"], 2.5)
    assert _close(dining["budget_left"], -1.5)
    latency = rows["dining", "latency"]
    # 39 of 195 slower than 30 s = 20% against a 5% budget: 4x.
    assert latency["objective"] == 0.95
    assert _close(latency["sli"], 0.8) and _close(latency["burn_rate_5m"], 4)
    assert _close(latency["budget_left"], -3)
    # No traffic: the objective is known, no ratio is.
    flights = rows["flights", "availability"]
    assert flights["objective"] == 0.99
    assert (flights["sli"], flights["budget_left"], flights["burn_rate_1h"]) == (None, None, None)


def test_the_table_and_the_type_filter(agentjobs: Any, prometheus: PrometheusServer) -> None:
    table = agentjobs("slo", "dining", "--prometheus-url", prometheus.url)
    assert (table.code, table.err) == (0, "")
    assert table_row(table.out, "TYPE") == [
        "TYPE", "SLO", "OBJECTIVE", "WINDOW", "SLI", "BUDGET LEFT", "BURN 1h", "BURN 5m",
    ]  # fmt: skip
    rows = [line for line in table.out.splitlines() if "dining" in line]
    assert len(rows) == 2 and "flights" not in table.out
    cells = table_row(table.out, "dining")
    assert cells[1:] == ["availability", "99.00%", "28d", "97.50%", "-150.00%", "2.50x", "2.50x"]
    assert "1x spends the budget in exactly the window" in " ".join(table.out.split())


def test_the_environment_names_the_prometheus(
    agentjobs: Any, prometheus: PrometheusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTJOBS_PROMETHEUS_URL", prometheus.url)
    document = agentjobs("slo", "flights", "-o", "json").json()
    assert {s["agent_type"] for s in document["slos"]} == {"flights"}


def test_a_type_without_recordings_is_noted(agentjobs: Any, prometheus: PrometheusServer) -> None:
    done = agentjobs("slo", "dining", "lodging", "--prometheus-url", prometheus.url, "-o", "json")
    assert done.code == 0 and done.err == "note: no SLO recordings of lodging\n"
    only_unknown = agentjobs("slo", "lodging", "--prometheus-url", prometheus.url)
    assert only_unknown.code == 1
    assert only_unknown.err.startswith(f"error: Prometheus at {prometheus.url} failed: no SLO")


def test_unreachable_prometheus_is_one_line_and_exit_1(refused_url: str) -> None:
    done = run("slo", "--prometheus-url", refused_url)
    assert done.returncode == 1 and done.stdout == ""
    line = one_error_line(done)
    assert line.startswith(f"error: Prometheus at {refused_url} failed: cannot reach it")


def test_a_prometheus_without_the_rule_file_says_what_to_load(agentjobs: Any) -> None:
    with PrometheusServer() as bare:
        done = agentjobs("slo", "--prometheus-url", bare.url)
    assert done.code == 1 and done.out == ""
    assert done.err.count("\n") == 1 and "alerts/prometheus/queue-alerts.rules.yml" in done.err


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["slo"], "give --prometheus-url or AGENTJOBS_PROMETHEUS_URL"),
        (["slo", "--prometheus-url", "prometheus:9090"], "must be an http(s) URL"),
    ],
)
def test_no_or_a_bad_url_is_a_usage_error(agentjobs: Any, args: list[str], problem: str) -> None:
    done = agentjobs(*args)
    assert done.code == 2 and problem in done.err and done.err.count("\n") == 1


def test_help_lists_slo(tmp_path: Path) -> None:
    done = run("--help")
    assert done.returncode == 0 and "│ slo " in done.stdout
