"""`bench.cost --fair` tiny, as a user runs it (its own redis-server, worker processes):
every side's drain, memory and enqueue reading is printed and positive, the commandstats
table lists the claim script for each side, and the exit status follows the printed
verdicts (no timing thresholds: judging speed is the bench's job)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from bench.cost import main
from bench.cost_fair import SIDES

NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


@pytest.fixture(scope="module")
def run() -> tuple[int, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["--fair", "--jobs", "60", "--rounds", "1", "--concurrency", "4"])
    return status, out.getvalue().splitlines()


def _line(printed: list[str], start: str) -> str:
    found = [line for line in printed if line.startswith(start)]
    assert len(found) == 1, f"expected one line starting {start!r} in:\n" + "\n".join(printed)
    return found[0]


def _numbers(text: str) -> list[float]:
    return [float(cell.replace(",", "")) for cell in re.findall(NUMBER, text)]


def test_every_side_has_positive_drain_memory_and_enqueue_readings(
    run: tuple[int, list[str]],
) -> None:
    _, printed = run
    drains = printed.index(next(line for line in printed if line.startswith("Drain of 60 jobs")))
    memory = printed.index(next(line for line in printed if line.startswith("Memory per queued")))
    enqueue = printed.index(next(line for line in printed if line.startswith("Enqueue one by")))
    for side in SIDES:
        start = f"  {side:<18} "
        # us/job, min, max, jobs/s; bytes per job; us per enqueue
        (drain,) = [line for line in printed[drains:memory] if line.startswith(start)]
        assert len(_numbers(drain[len(start) :])) == 4, drain
        assert all(value > 0 for value in _numbers(drain[len(start) :])), drain
        (queued,) = [line for line in printed[memory:enqueue] if line.startswith(start)]
        (enqueued,) = [line for line in printed[enqueue:] if line.startswith(start)]
        for line in (queued, enqueued):
            assert _numbers(line[len(start) :])[0] > 0, line
    for side in SIDES[1:]:
        ratio = _line(printed, f"  {side} / fifo: ")
        assert _numbers(ratio.split(": ")[1])[0] > 0, ratio


def test_the_claim_script_is_counted_on_every_side(run: tuple[int, list[str]]) -> None:
    _, printed = run
    cells = _line(printed, "  evalsha ").split()[1:]
    # calls/job, us/job, "us" per side
    assert len(cells) == 3 * len(SIDES), cells
    assert all(float(cells[i]) > 0 for i in range(0, len(cells), 3)), cells


def test_the_exit_status_follows_the_verdicts(run: tuple[int, list[str]]) -> None:
    status, printed = run
    listed = _line(printed, "targets: ").removeprefix("targets: ").split("; ")
    assert len(listed) == 4 and all(entry.endswith((" met", " MISSED")) for entry in listed)
    assert status == (1 if any(entry.endswith("MISSED") for entry in listed) else 0)
