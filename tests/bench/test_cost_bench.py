"""bench.cost at a tiny N against the test Redis: every row is printed and every ratio is
a positive number (no timing thresholds: judging speed is the bench's job), and the cost
table it writes into docs/operations.md is there."""

from __future__ import annotations

import re

import pytest
import redis

from bench.cost import measure
from bench.cost_readings import STATES, CostReport
from bench.cost_report import (
    BEGIN,
    DOCS,
    END,
    docs_section,
    machine,
    render,
    replace_section,
    targets,
)
from tests.support.redis_server import RedisServer

JOBS = 200
SIZE = 512
PAYLOAD = "0.5 KiB (512 B)"
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
CPU_ROWS = (
    "enqueue, one by one",
    "enqueue_many",
    "enqueue_many vs batched LPUSH",
    "drain, 1 worker (concurrency 4)",
    "process CPU per drained job",
)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.fixture(scope="module")
def report(redis_server: RedisServer) -> CostReport:
    client = redis.Redis(port=redis_server.port)
    try:
        client.flushall()
    finally:
        client.close()
    return measure(redis_server.url, JOBS, sizes=(SIZE,), concurrency=4)


@pytest.fixture(scope="module")
def printed(report: CostReport) -> list[str]:
    return render(report).splitlines()


def _line(printed: list[str], start: str) -> str:
    found = [line for line in printed if line.startswith(start)]
    assert len(found) == 1, f"expected one line starting {start!r} in:\n" + "\n".join(printed)
    return found[0]


def test_every_memory_row_has_positive_sizes_and_ratios(printed: list[str]) -> None:
    for state in STATES:
        start = f"{PAYLOAD:<22} {state:<14} "
        ours, raw, _, ratio = _line(printed, start).removeprefix(start).split()[:4]
        assert _number(ours) > 0, state
        if state in ("queued", "running"):
            assert _number(raw) > 0 and _number(ratio) > 0, state
        else:  # a raw list holds nothing once a job is done
            assert _number(raw) == 0 and ratio == "-", state


def test_every_cpu_row_has_positive_costs_and_ratios(printed: list[str]) -> None:
    for name in CPU_ROWS:
        cells = re.findall(NUMBER, _line(printed, f"{name:<36} ")[36:])
        # ours us, raw us, ratio, then (except the process row) ours/s, raw/s, ratio
        wanted = 3 if name == "process CPU per drained job" else 6
        values = [_number(cell) for cell in cells[:wanted]]
        assert len(values) == wanted and all(value > 0 for value in values), (name, cells)


def test_commands_per_drained_job_are_listed(printed: list[str]) -> None:
    header = printed.index(f"{'command':<20} {'calls/job':>10} {'us/call':>8} {'us/job':>8}")
    rows = []
    for line in printed[header + 1 :]:
        if not re.match(rf"[a-z|]+\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$", line):
            break
        rows.append(line.split())
    assert rows, "no command rows under the commandstats header"
    assert all(_number(calls) > 0 for _, calls, _, _ in rows)
    assert re.search(r"raw BRPOP drain: brpop 1\.000/job", "\n".join(printed))


def test_sizing_and_targets_are_printed(report: CostReport, printed: list[str]) -> None:
    holds = re.fullmatch(
        rf"a maxmemory 1gb Redis holds +{NUMBER} queued jobs of {re.escape(PAYLOAD)} "
        rf"\(raw list: {NUMBER}\)",
        _line(printed, "a maxmemory 1gb Redis holds"),
    )
    assert holds is not None and _number(holds[1]) > 0 and _number(holds[2]) > 0
    per_core = _line(printed, "drained jobs/s per Redis core: ")
    assert [_number(n) > 0 for n in re.findall(NUMBER, per_core)] == [True] * 4
    listed = _line(printed, "targets: ").removeprefix("targets: ").split("; ")
    assert len(listed) == len(targets(report)) == 6
    for entry in listed:
        assert entry.endswith((" met", " MISSED")), entry
    # Each ratio is printed before the comparison with its target: "1.503x <= 1.5x".
    ratios = [_number(n) for n in re.findall(r"([0-9.]+)x [<>]= ", " ".join(listed))]
    assert len(ratios) == 5 and all(ratio > 0 for ratio in ratios), listed


def test_docs_section_of_a_report_replaces_only_what_lies_between_the_markers(
    report: CostReport,
) -> None:
    section = docs_section(report, ".venv/bin/python -m bench.cost", machine("7.0.0"))
    assert f"| {PAYLOAD} |" in section and "redis-server 7.0.0" in section
    before = f"intro\n\n{BEGIN}\nold table\n{END}\n\nafter\n"
    assert replace_section(before, section) == f"intro\n\n{BEGIN}\n{section}{END}\n\nafter\n"
    with pytest.raises(ValueError, match="cost-table"):
        replace_section("no markers here", section)


def test_docs_hold_a_cost_table_between_the_markers() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    assert block is not None, f"{DOCS.name} lost its cost-table markers"
    assert "Measured by `" in block.group(1), "the cost table is empty: run bench.cost"
    assert re.search(r"^\| payload \| queued \|", block.group(1), re.M)
