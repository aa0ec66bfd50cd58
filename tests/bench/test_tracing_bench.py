"""bench.tracing at a tiny N against the test Redis: every side is a child process of the
tree it is meant to measure (old: the archived pre-tracing revision; off and on: this
checkout), only the on child exports spans, enqueue blocks and rounds alternate the sides
in a rotating order, and the table carries the off/old ratio with met/MISSED (no timing
thresholds: judging speed is the bench's job)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.queue_throughput import AGENT_TYPE, make_jobs
from bench.tracing import (
    BlockSide,
    Plan,
    Results,
    RoundSide,
    measure,
    render,
    run_blocks,
    run_rounds,
    target,
)
from bench.tracing_child import OLD_REVISION, ROOT, PhaseChild, PhaseChildError
from bench.tracing_phases import PHASES, ROUND_PHASES
from platform_common.jobs.queue import JobQueue, QueueSettings

JOBS = 20
CONCURRENCY = 4
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
VERDICT_PREFIX = "off within 5% of old (off/old jobs/s): "
THIS_QUEUE = (ROOT / "platform_common" / "jobs" / "queue").resolve()


def _git_reason() -> str | None:
    """Why the old revision cannot be checked out here, or None when it can."""
    if shutil.which("git") is None:
        return "git is not installed"
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{OLD_REVISION}^{{commit}}"], cwd=ROOT, capture_output=True
    )
    if found.returncode != 0:
        return f"{OLD_REVISION} is not in this checkout (a shallow clone or an archive)"
    return None


GIT_REASON = _git_reason()
needs_git = pytest.mark.skipif(GIT_REASON is not None, reason=GIT_REASON or "")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@needs_git
def test_the_old_child_runs_its_own_pre_tracing_tree_and_measures_every_phase(
    single_node_url: str,
) -> None:
    with PhaseChild(OLD_REVISION) as old:
        package = Path(old.package)
        assert package.parts[-3:] == ("platform_common", "jobs", "queue")
        assert package.resolve() != THIS_QUEUE
        assert (package / "consumer.py").is_file()
        assert not (package / "tracing.py").exists(), "not the tree from before tracing"
        seconds = old.enqueue_block(single_node_url, make_jobs(JOBS))
        rates = old.round(single_node_url, make_jobs(JOBS), AGENT_TYPE, CONCURRENCY)
        spans = old.spans()
    assert seconds > 0
    assert sorted(rates) == sorted(ROUND_PHASES)
    assert all(rate > 0 for rate in rates.values()), rates
    assert spans == 0
    assert not package.exists(), "the archived tree outlived the context"


def test_an_unknown_revision_is_a_clear_error() -> None:
    with (
        pytest.raises(PhaseChildError, match=r"git archive 0{40} failed|cannot run git"),
        PhaseChild("0" * 40),
    ):
        pass


@pytest.mark.parametrize("traced", [False, True], ids=["off", "on"])
def test_the_off_and_on_children_import_this_checkouts_tree(traced: bool) -> None:
    with PhaseChild(traced=traced) as child:
        package = Path(child.package)
    assert package.resolve() == THIS_QUEUE
    assert (package / "tracing.py").is_file(), "not a tree with tracing"


def test_only_the_on_child_exports_spans(single_node_url: str) -> None:
    exported = {}
    for name, traced in (("off", False), ("on", True)):
        with PhaseChild(traced=traced) as child:
            child.enqueue_block(single_node_url, make_jobs(JOBS))
            child.round(single_node_url, make_jobs(JOBS), AGENT_TYPE, CONCURRENCY)
            exported[name] = child.spans()
    assert exported["off"] == 0
    assert exported["on"] > 0, "the SDK side exported no span"


def test_the_enqueue_blocks_alternate_the_sides_in_a_rotating_order() -> None:
    calls: list[str] = []

    def side(name: str) -> BlockSide:
        def run(jobs: list[dict[str, Any]]) -> float:
            assert len(jobs) == 3
            calls.append(name)
            return 0.5

        return run

    seconds = run_blocks({name: side(name) for name in ("old", "off", "on")}, 3, 4)
    assert calls == [
        *("old", "off", "on"), *("off", "on", "old"), *("on", "old", "off"), *("old", "off", "on"),
    ]  # fmt: skip
    assert seconds == dict.fromkeys(("old", "off", "on"), [0.5] * 4)


async def test_every_sides_blocks_go_to_one_queue_not_flushed_between(
    single_node_url: str,
) -> None:
    blocks = 3
    with PhaseChild() as off, PhaseChild(traced=True) as on:
        sides: dict[str, BlockSide] = {
            "off": lambda jobs: off.enqueue_block(single_node_url, jobs),
            "on": lambda jobs: on.enqueue_block(single_node_url, jobs),
        }
        seconds = run_blocks(sides, JOBS, blocks)
    assert all(len(by_block) == blocks and min(by_block) > 0 for by_block in seconds.values())
    queue = await JobQueue.connect(QueueSettings.from_url(single_node_url))
    try:
        assert (await queue.stats(AGENT_TYPE)).queued == 2 * blocks * JOBS
    finally:
        await queue.aclose()


def test_rounds_rotate_the_order_of_the_sides() -> None:
    calls: list[str] = []

    def side(name: str) -> RoundSide:
        def run(many: list[dict[str, Any]]) -> dict[str, float]:
            assert len(many) == 3
            calls.append(name)
            return dict.fromkeys(ROUND_PHASES, 1.0)

        return run

    results = run_rounds({name: side(name) for name in ("old", "off", "on")}, 3, 4)
    assert calls == [
        *("old", "off", "on"), *("off", "on", "old"), *("on", "old", "off"), *("old", "off", "on"),
    ]  # fmt: skip
    assert all(len(rates) == 4 for by_side in results.values() for rates in by_side.values())


@needs_git
def test_the_table_has_every_side_and_a_verdict_per_phase(single_node_url: str) -> None:
    plan = Plan(blocks=3, block_jobs=JOBS, rounds=2, jobs=JOBS, concurrency=CONCURRENCY)
    with PhaseChild(OLD_REVISION) as old, PhaseChild() as off, PhaseChild(traced=True) as on:
        results = measure({"old": old, "off": off, "on": on}, single_node_url, plan)
    assert all(len(results.blocks[side]) == 3 for side in ("old", "off", "on"))
    assert all(len(rates) == 2 for by_side in results.rounds.values() for rates in by_side.values())
    printed = render(results, "header").splitlines()
    assert printed[1].split() == [
        "operation", "old", "jobs/s", "off", "jobs/s", "on", "jobs/s", "on/off", "off/old",
    ]  # fmt: skip
    rows = printed[2 : 2 + len(PHASES)]
    assert [row.split()[0] for row in rows] == list(PHASES), printed
    for phase, row in zip(PHASES, rows, strict=True):
        values = [_number(cell) for cell in re.findall(NUMBER, row[len(phase) :])]
        assert len(values) == 5 and all(value > 0 for value in values), row
    assert re.fullmatch(
        rf"enqueue off/old per block: min {NUMBER}, max {NUMBER}, median {NUMBER} \(3 blocks\)",
        printed[-2],
    ), printed[-2]
    verdicts = printed[-1].removeprefix(VERDICT_PREFIX).split("; ")
    assert [verdict.split()[0] for verdict in verdicts] == list(PHASES), printed[-1]
    for verdict in verdicts:
        assert re.fullmatch(rf"[a-z_]+ {NUMBER} >= 0\.95 (met|MISSED)", verdict), verdict


def _results(old: float, off: float) -> Results:
    """Rates `old` and `off` (and on = off) for every phase: enqueue as two blocks of 1900
    jobs whose seconds give that rate (exactly, for 100 and 95), the round phases as
    medians of three rounds."""
    return Results(
        block_jobs=1900,
        blocks={
            side: [1900 / rate] * 2 for side, rate in (("old", old), ("off", off), ("on", off))
        },
        rounds={
            side: {phase: [rate, rate, 1.0] for phase in ROUND_PHASES}
            for side, rate in (("old", old), ("off", off), ("on", off))
        },
    )


@pytest.mark.parametrize("phase", PHASES)
def test_off_within_5_percent_of_old_is_met_at_0_95_and_missed_below(phase: str) -> None:
    ratio, met = target(_results(100.0, 95.0), phase) or (0.0, False)
    assert ratio == pytest.approx(0.95) and met
    ratio, met = target(_results(100.0, 94.9), phase) or (0.0, True)
    assert ratio == pytest.approx(0.949) and not met
    assert f"{phase} 0.949 >= 0.95 MISSED" in render(_results(100.0, 94.9), "h")


def test_enqueue_is_total_jobs_over_total_seconds_and_its_paired_spread_is_shown() -> None:
    results = _results(100.0, 100.0)
    results.block_jobs = 100
    results.blocks["old"] = [1.0, 2.0]  # 200 jobs in 3 s
    results.blocks["off"] = [2.0, 1.0]
    printed = render(results, "h").splitlines()
    row = printed[2]
    assert row.split()[1:3] == ["67", "67"] and row.split()[-1] == "1.000", row
    assert printed[-2] == "enqueue off/old per block: min 0.500, max 2.000, median 1.250 (2 blocks)"


def test_without_old_there_is_no_old_column_and_no_verdict() -> None:
    results = _results(100.0, 95.0)
    del results.blocks["old"]
    del results.rounds["old"]
    assert target(results, "drain") is None
    printed = render(results, "h").splitlines()
    assert printed[1].split() == ["operation", "off", "jobs/s", "on", "jobs/s", "on/off"]
    assert len(printed) == 2 + len(PHASES)
