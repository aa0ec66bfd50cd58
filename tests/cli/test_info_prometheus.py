"""`agentjobs info --prometheus-url`: the last minute's enqueued, completed and failed from
a real Prometheus, and the fall back to the totals, with a note, when it does not answer.

The Prometheus gets its counters by backfill (`promtool tsdb create-blocks-from
openmetrics` before it starts), from 10 minutes ago to 10 minutes ahead: exact counters
at exact times, so `increase(...[1m])` now is known without waiting for scrapes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from platform_common.jobs.operations.prometheus import (
    COMPLETED_COUNTER,
    ENQUEUED_COUNTER,
    FAILED_COUNTER,
    PrometheusSource,
    parse_last_minute,
)
from tests.cli.jobs_made import enqueue
from tests.cli.runner import child_env, table_row
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusServer, promtool

STEP = 15
"""Seconds between backfilled samples (a scrape interval)."""
PER_STEP = {"dining": (3, 2, 1), "flights": (1, 1, 0)}
"""Enqueued, completed and failed added at each sample: 12, 8 and 4 a minute for dining."""
COUNTERS = (ENQUEUED_COUNTER, COMPLETED_COUNTER, FAILED_COUNTER)


# The commands read Redis as tests/cli/test_operator_cli.py proves on a cluster too; here
# what varies is Prometheus.
ON_THE_SINGLE_NODE = pytest.mark.single_node("the Redis side runs on a cluster elsewhere")


def _openmetrics(first_minute: int, last_minute: int) -> str:
    lines = []
    for which, counter in enumerate(COUNTERS):
        for agent_type, steps in PER_STEP.items():
            times = range(first_minute * 60, last_minute * 60 + 1, STEP)
            for index, at in enumerate(times):
                lines.append(f'{counter}{{agent_type="{agent_type}"}} {index * steps[which]} {at}')
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus holding the three counters around now; its URL."""
    now_minute = math.floor(time.time() / 60)
    source = tmp_path_factory.mktemp("backfill") / "counters.om"
    source.write_text(_openmetrics(now_minute - 10, now_minute + 10))
    server = PrometheusServer()
    try:
        made = promtool(
            "tsdb", "create-blocks-from", "openmetrics", str(source),
            str(server.directory / "data"),
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        server.start()
        yield server.url
    finally:
        server.cleanup()


@ON_THE_SINGLE_NODE
def test_info_shows_the_last_minute_from_prometheus(
    agentjobs: Any, redis_url: str, prometheus: str
) -> None:
    enqueue(redis_url, 2)  # the totals in Redis: not what the columns show now
    document = agentjobs("info", "dining", "flights", "dmc", "--prometheus-url", prometheus,
                         "-o", "json").json()  # fmt: skip
    dining, flights, dmc = document["types"]
    assert document["last_minute_source"] == "prometheus"
    assert document["prometheus_problem"] is None
    assert dining["last_minute"] == {
        "enqueued": 12, "completed": 8, "failed": 4, "seconds": 60.0, "source": "prometheus",
    }  # fmt: skip
    assert dining["totals"]["enqueued"] == 2 and dining["queued"] == 2
    assert flights["last_minute"]["enqueued"] == 4 and flights["last_minute"]["failed"] == 0
    assert dmc["last_minute"] is None  # Prometheus has no series of it: unknown, not 0

    table = agentjobs("info", "dining", "dmc", "--prometheus-url", prometheus)
    assert (table.code, table.err) == (0, "")
    assert table_row(table.out, "TYPE")[7:10] == ["ENQUEUED (1m)", "COMPLETED (1m)", "FAILED (1m)"]
    assert table_row(table.out, "dining")[7:10] == ["12", "8", "4"]
    assert table_row(table.out, "dmc")[7:10] == ["—", "—", "—"]
    assert "Counts over the last minute, from Prometheus" in table.out


@ON_THE_SINGLE_NODE
def test_the_environment_names_the_prometheus(
    agentjobs: Any, prometheus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTJOBS_PROMETHEUS_URL", prometheus)
    document = agentjobs("info", "dining", "-o", "json").json()
    assert document["types"][0]["last_minute"]["completed"] == 8


@ON_THE_SINGLE_NODE
def test_without_prometheus_the_columns_are_totals_with_the_hint(agentjobs: Any) -> None:
    table = agentjobs("info", "dining")
    assert table.code == 0 and table.err == ""
    assert table_row(table.out, "TYPE")[7:10] == [
        "ENQUEUED (total)", "COMPLETED (total)", "FAILED (total)",
    ]  # fmt: skip
    assert "AGENTJOBS_PROMETHEUS_URL" in table.out and "--prometheus-url" in table.out
    document = agentjobs("info", "dining", "-o", "json").json()
    assert document["last_minute_source"] is None and document["prometheus_problem"] is None


@ON_THE_SINGLE_NODE
def test_a_prometheus_that_fails_is_a_note_and_the_totals(
    agentjobs: Any, redis_url: str, refused_url: str
) -> None:
    enqueue(redis_url, 3)
    table = agentjobs("info", "dining", "--prometheus-url", refused_url)
    assert table.code == 0
    (note,) = table.err.splitlines()
    assert note.startswith(f"note: Prometheus at {refused_url} failed: cannot reach it: ")
    assert note.endswith("; showing the totals") and "Connection refused" in note
    assert table_row(table.out, "TYPE")[7] == "ENQUEUED (total)"
    assert table_row(table.out, "dining")[7] == "3"

    document = agentjobs("info", "dining", "--prometheus-url", refused_url, "-o", "json").json()
    assert document["last_minute_source"] is None
    assert document["prometheus_problem"].startswith(f"Prometheus at {refused_url} failed:")
    assert document["types"][0]["last_minute"] is None
    assert document["types"][0]["totals"]["enqueued"] == 3


@ON_THE_SINGLE_NODE
def test_a_prometheus_url_that_is_not_a_web_address_is_a_usage_error(agentjobs: Any) -> None:
    done = agentjobs("info", "--prometheus-url", "file:///etc/passwd")
    assert done.code == 2
    assert done.err == (
        "error: PrometheusSource.url must be an http(s) URL, got 'file:///etc/passwd'\n"
    )


@ON_THE_SINGLE_NODE
def test_watch_takes_the_last_minute_from_prometheus(agentjobs: Any, prometheus: str) -> None:
    done = agentjobs("info", "dining", "--watch", "--count", "2", "--interval", "0.1",
                     "--prometheus-url", prometheus, "-o", "json")  # fmt: skip
    assert done.code == 0, done.err
    lines = [json.loads(line) for line in done.out.splitlines()]
    assert len(lines) == 2
    for line in lines:
        assert line["types"][0]["last_minute"]["completed"] == 8
        assert line["last_minute_source"] == "prometheus"


@ON_THE_SINGLE_NODE
def test_watch_falls_back_to_its_own_readings_with_one_note(
    redis_url: str, refused_url: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs", "info", "dining", "--watch", "--count",
         "3", "--interval", "0.1", "-o", "json", "--redis-url", redis_url],
        cwd=REPO_ROOT, env=child_env({"AGENTJOBS_PROMETHEUS_URL": refused_url}),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (note,) = done.stderr.splitlines()  # once, not at every refresh
    assert note.startswith(f"note: Prometheus at {refused_url} failed: cannot reach it")
    assert note.endswith("; showing this watch's own readings")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["last_minute_source"] for line in lines] == ["watch"] * 3
    assert lines[0]["types"][0]["last_minute"]["seconds"] == 0.0


def test_a_malformed_answer_is_refused() -> None:
    vector = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"agent_type": "dining"}, "value": [1.0, "7.6"]},
        {"metric": {"agent_type": "other"}, "value": [1.0, "9"]},
        {"metric": {"agent_type": "flights"}, "value": [1.0, "NaN"]},
    ]}}).encode()  # fmt: skip
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
    counts = parse_last_minute([vector, empty.encode(), vector], ["dining", "flights"])
    assert list(counts) == ["dining"]  # NaN and types not asked for are left out
    assert (counts["dining"].enqueued, counts["dining"].completed) == (8, 0)
    from platform_common.jobs.operations.prometheus import PrometheusUnavailable

    matrix = b'{"status": "success", "data": {"resultType": "matrix", "result": []}}'
    with pytest.raises(PrometheusUnavailable, match="the answer is not a vector"):
        parse_last_minute([matrix, matrix, matrix], ["dining"])
    assert "increase(acme_jobs_enqueued_total" in PrometheusSource("http://p", "acme").query(
        ENQUEUED_COUNTER, ["dining"]
    )
