"""The overview's last hour from a real Prometheus, and the fall back to the console's own
readings when Prometheus is not set or does not answer.

The Prometheus gets its hour by backfill (`promtool tsdb create-blocks-from openmetrics`
into its data folder before it starts): exact counters at exact times, no waiting for
scrapes."""

from __future__ import annotations

import math
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from platform_common.jobs.console import PrometheusSource
from platform_common.jobs.console.prometheus_history import COMPLETED_COUNTER, FAILED_COUNTER
from platform_common.jobs.queue import JobQueue
from tests.cli.runner import one_error_line, run
from tests.console.conftest import PREFIX, client_of, console_app
from tests.support.prometheus import PrometheusServer, promtool

STEP = 15
"""Seconds between backfilled samples (a scrape interval)."""
PER_STEP = {"dining": (2, 1), "flights": (1, 0)}
"""Completed and failed jobs added at each sample: 8 and 4 a minute for dining."""


def _openmetrics(first_minute: int, last_minute: int) -> str:
    lines = []
    for counter, which in ((COMPLETED_COUNTER, 0), (FAILED_COUNTER, 1)):
        for agent_type, steps in PER_STEP.items():
            times = range(first_minute * 60, last_minute * 60 + 1, STEP)
            for index, at in enumerate(times):
                value = index * steps[which]
                lines.append(f'{counter}{{agent_type="{agent_type}"}} {value} {at}')
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, int]]:
    """A Prometheus holding both counters from 40 to 10 minutes ago; (url, first, last)."""
    now_minute = math.floor(time.time() / 60)
    first, last = now_minute - 40, now_minute - 10
    source = tmp_path_factory.mktemp("backfill") / "counters.om"
    source.write_text(_openmetrics(first, last))
    server = PrometheusServer()
    try:
        made = promtool(
            "tsdb", "create-blocks-from", "openmetrics", str(source),
            str(server.directory / "data"),
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        server.start()
        yield server.url, first, last
    finally:
        server.cleanup()


def _row(page: str, agent_type: str) -> str:
    match = re.search(rf">{agent_type}</a></th>(.*?)</tr>", page, re.S)
    assert match, f"no row of {agent_type}"
    return match[1]


def _label(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, UTC).strftime("%H:%M UTC")


async def test_the_overview_charts_every_minute_prometheus_has(
    queue: JobQueue, backfilled: tuple[str, int, int]
) -> None:
    url, first, last = backfilled
    app = console_app(queue, prometheus=PrometheusSource(url))
    async with client_of(app) as client:
        response = await client.get(f"{PREFIX}/")
    assert response.status_code == 200
    page = response.text
    assert f"Chart source: Prometheus ({url})" in page
    dining, flights = _row(page, "dining"), _row(page, "flights")
    # Whole minutes inside the backfilled span (its edges are extrapolated by increase()).
    for minute in range(first + 2, last - 1):
        assert f"{_label(minute)}: 8 completed, 4 failed" in dining, _label(minute)
        assert f"{_label(minute)}: 4 completed, 0 failed" in flights, _label(minute)
    # Before the backfill and after it Prometheus has nothing: not covered, not zero.
    assert f"{_label(first - 2)}: not read" in dining
    assert f"{_label(last + 3)}: not read" in dining
    assert "of 60 min in Prometheus" in dining
    # A type Prometheus knows nothing of: an empty chart, still from Prometheus.
    assert "0 completed, 0 failed (0 of 60 min in Prometheus)" in _row(page, "dmc")


async def test_without_prometheus_the_chart_is_the_consoles_readings(
    client: httpx.AsyncClient,
) -> None:
    page = (await client.get(f"{PREFIX}/")).text
    assert "Chart source: this console's own readings (no Prometheus set)." in page
    assert "of 60 min read" in page


async def test_an_unreachable_prometheus_falls_back_and_says_why(queue: JobQueue) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connection refused
        source = PrometheusSource(f"http://127.0.0.1:{port}", timeout_seconds=1)
        async with client_of(console_app(queue, prometheus=source)) as client:
            response = await client.get(f"{PREFIX}/")
    assert response.status_code == 200
    page = response.text
    assert (
        "Chart source: this console's own readings "
        f"(Prometheus at http://127.0.0.1:{port} failed: cannot reach it"
    ) in page
    assert "of 60 min read" in page


async def test_a_prometheus_that_never_answers_is_given_up_on(queue: JobQueue) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections queue up and are never answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        source = PrometheusSource(url, timeout_seconds=0.2)
        async with client_of(console_app(queue, prometheus=source)) as client:
            page = (await client.get(f"{PREFIX}/")).text
    assert f"(Prometheus at {url} failed:" in page and "timed out" in page


def test_the_cli_refuses_a_prometheus_url_that_is_not_a_web_address() -> None:
    done = run("console", "--prometheus-url", "file:///etc/passwd")
    assert done.returncode == 2
    assert "PrometheusSource.url must be an http(s) URL" in one_error_line(done)


def test_the_console_help_names_the_prometheus_option() -> None:
    assert "--prometheus-url" in run("console", "--help").stdout
