"""bench.fairness tiny against the test Redis: both rows are printed with their numbers,
FIFO makes B wait behind every A job still waiting, and fair share serves B in turn (A
starts in B's window bounded by B's jobs and one take per end, far below FIFO's). No
timing thresholds: the counts are orders of starts, not durations."""

from __future__ import annotations

import re

import pytest
import redis

from bench.fairness import Fairness, measure, render
from tests.support.redis_server import RedisServer

A_JOBS = 200
B_JOBS = 10
CONCURRENCY = 4
HANDLER_MS = 20.0
"""Slow enough that A's 200 jobs take a second: most of them still wait when B comes."""
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


@pytest.fixture(scope="module")
def result(redis_server: RedisServer) -> Fairness:
    client = redis.Redis(port=redis_server.port)
    try:
        client.flushall()
    finally:
        client.close()
    return measure(redis_server.url, A_JOBS, B_JOBS, CONCURRENCY, HANDLER_MS, progress=str)


def _row(printed: list[str], name: str) -> list[float]:
    found = [line for line in printed if line.startswith(f"{name:<22} ")]
    assert len(found) == 1, f"no single row {name!r} in:\n" + "\n".join(printed)
    cells = re.findall(NUMBER, found[0][22:])
    assert len(cells) == 6, found[0]
    return [float(cell.replace(",", "")) for cell in cells]


def test_both_sides_are_printed_with_their_counts_and_waits(result: Fairness) -> None:
    printed = render(result).splitlines()
    for name, side in (("fair_by none (FIFO)", result.off), ("fair_by tenant", result.on)):
        waiting, in_window, p50, p95, worst, seconds = _row(printed, name)
        assert (waiting, in_window) == (side.a_waiting, side.a_in_window)
        assert 0 <= p50 <= p95 <= worst and seconds > 0
        assert len(side.b_waits_ms) == B_JOBS
    ratios = [line for line in printed if line.startswith("on / off ")]
    assert len(ratios) == 1 and len(re.findall(r"[0-9.]+x", ratios[0])) == 3, printed
    assert re.search(r"^criterion: .*: (met|MISSED)$", printed[-1])


def test_fifo_makes_b_wait_for_every_a_job_still_waiting(result: Fairness) -> None:
    off = result.off
    assert off.a_in_window == off.a_waiting > 0


def test_fair_share_serves_b_in_turn(result: Fairness) -> None:
    # Round robin over A, B and the shared list's turn: one A start per B start, plus at
    # most a take's worth sharing a millisecond with each end of the window.
    on, off = result.on, result.off
    assert on.a_in_window <= B_JOBS + 2 * CONCURRENCY
    assert on.a_in_window * 4 < off.a_in_window, (on, off)
