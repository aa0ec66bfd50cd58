"""The metric table of docs/reference.md is rendered from the catalogue: every metric,
every column."""

from __future__ import annotations

from platform_common.jobs.metric_catalogue import CATALOGUE
from platform_common.jobs_exporter.metric_table import render_metric_table


def test_one_row_per_catalogue_metric_in_order() -> None:
    lines = render_metric_table().splitlines()
    assert lines[0] == "| metric | type | labels | unit | help |"
    rows = [line.split(" | ") for line in lines[2:]]
    assert [row[0].strip("| `") for row in rows] == [m.name for m in CATALOGUE]
    for row, metric in zip(rows, CATALOGUE, strict=True):
        assert row[1] == metric.type
        assert row[2] == (", ".join(f"`{label}`" for label in metric.labels) or "none")
        assert row[4].removesuffix(" |") == metric.help


def test_units_follow_the_names() -> None:
    units = {line.split(" | ")[0].strip("| `"): line.split(" | ")[3]
             for line in render_metric_table().splitlines()[2:]}  # fmt: skip
    assert units["job_latency_seconds"] == "seconds"
    assert units["worker_last_heartbeat_timestamp_seconds"] == "seconds (Unix time)"
    assert units["queue_depth"] == "count"
    assert render_metric_table().endswith("|\n")
