"""PrometheusSource and the parsing of query_range answers, without a server: the
bounds, the mapping of evaluation times to minutes, and every malformed answer refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from platform_common.jobs.console.prometheus_history import (
    COMPLETED_COUNTER,
    PrometheusSource,
    PrometheusUnavailable,
    parse_increases,
    prometheus_chart,
)

FIRST = 29_000_000
"""The hour's first minute index (minute k starts at k * 60 s)."""


def answer(*series: tuple[dict[str, str], list[list[Any]]], status: str = "success") -> bytes:
    result = [{"metric": labels, "values": values} for labels, values in series]
    return json.dumps(
        {"status": status, "data": {"resultType": "matrix", "result": result}}
    ).encode()


def at_end_of(minute: int) -> float:
    return (minute + 1) * 60.0


def test_the_query_selects_exactly_the_shown_types_with_the_namespace() -> None:
    query = PrometheusSource("http://p:9090", "acme").query(COMPLETED_COUNTER, ["a.b", "c-d"])
    assert query == (
        'max by (agent_type) (increase(acme_jobs_completed_total{agent_type=~"a\\\\.b|c-d"}[1m]))'
    )


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"url": "javascript:alert(1)"}, r"url must be an http\(s\) URL"),
        ({"url": "http://"}, r"url must be an http\(s\) URL"),
        ({"url": "http://p", "namespace": "1bad"}, "not a metric prefix"),
        ({"url": "http://p", "timeout_seconds": 0}, "timeout_seconds must be in"),
        ({"url": "http://p", "timeout_seconds": 31}, "timeout_seconds must be in"),
    ],
)
def test_a_bad_source_is_refused_naming_the_field(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        PrometheusSource(**options)


def test_points_land_in_the_minute_they_end_and_round_to_whole_jobs() -> None:
    body = answer(
        ({"agent_type": "dining"}, [[at_end_of(FIRST), "4"], [at_end_of(FIRST + 59), "2.6"]]),
        ({"agent_type": "flights"}, [[at_end_of(FIRST + 1), "0.4"]]),
    )
    parsed = parse_increases(body, ["dining", "flights"], FIRST)
    assert parsed == {"dining": {FIRST: 4, FIRST + 59: 3}, "flights": {FIRST + 1: 0}}


def test_only_the_hour_and_the_asked_types_are_kept_and_nan_is_no_data() -> None:
    body = answer(
        (
            {"agent_type": "dining"},
            [
                [at_end_of(FIRST - 1), "9"],
                [at_end_of(FIRST + 60), "9"],
                [at_end_of(FIRST + 5), "NaN"],
                [at_end_of(FIRST + 6), "+Inf"],
                [at_end_of(FIRST + 7), "-3"],
            ],
        ),
        ({"agent_type": "hotels"}, [[at_end_of(FIRST), "1"]]),
        ({}, [[at_end_of(FIRST), "1"]]),
    )
    # A counter reset's negative extrapolation is no job, not minus three.
    assert parse_increases(body, ["dining"], FIRST) == {"dining": {FIRST + 7: 0}}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>", "not JSON"),
        (json.dumps({"status": "error", "error": "bad query"}).encode(), "bad query"),
        (json.dumps({"status": "success", "data": {"resultType": "vector"}}).encode(), "matrix"),
        (json.dumps({"status": "success", "data": {"resultType": "matrix"}}).encode(), "list"),
        (answer(({"agent_type": "dining"}, [["x", "1"]])), "not a \\[time, value\\] point"),
        (answer(({"agent_type": "dining"}, [[1.0]])), "not a \\[time, value\\] point"),
        (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [1]}})
         .encode(), "no labels"),
    ],
)  # fmt: skip
def test_a_malformed_answer_is_prometheus_unavailable(body: bytes, problem: str) -> None:
    with pytest.raises(PrometheusUnavailable, match=problem):
        parse_increases(body, ["dining"], FIRST)


async def test_an_unreachable_source_is_prometheus_unavailable_with_the_reason() -> None:
    # (The console then charts the recorded history: tests/console/test_recorded_chart.py.)
    source = PrometheusSource("http://127.0.0.1:9", timeout_seconds=1)
    with pytest.raises(PrometheusUnavailable, match=r"^cannot reach it"):
        await prometheus_chart(source, ["dining"], 0.0)


def test_a_days_bars_land_in_the_bar_they_end() -> None:
    width = 24 * 60  # seconds of a 24-minute bar
    first = 1_200_000
    points = [[(first + 1) * width, "7"], [(first + 60) * width, "2"], [(first + 61) * width, "9"]]
    body = answer(({"agent_type": "dining"}, points))
    assert parse_increases(body, ["dining"], first, bar_minutes=24) == {
        "dining": {first: 7, first + 59: 2}
    }
