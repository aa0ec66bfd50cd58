"""bench.tracing at a tiny N against the test Redis: the pre-tracing revision is measured
in its own process with its own tree, every side yields a positive rate per phase, the
rounds rotate, and the table carries the off/old ratio with met/MISSED (no timing
thresholds: judging speed is the bench's job)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from bench.queue_throughput import AGENT_TYPE, make_jobs
from bench.tracing import DroppingExporter, Measure, Rates, render, run_rounds, target
from bench.tracing_old import OLD_REVISION, ROOT, OldRevision, OldRevisionError
from bench.tracing_phases import PHASES, measure

JOBS = 20
CONCURRENCY = 4
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


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
def test_old_revision_runs_its_own_pre_tracing_tree_and_measures_every_phase(
    single_node_url: str,
) -> None:
    with OldRevision() as old:
        package = Path(old.package)
        assert package.parts[-3:] == ("platform_common", "jobs", "queue")
        assert package.resolve() != (ROOT / "platform_common" / "jobs" / "queue").resolve()
        assert (package / "consumer.py").is_file()
        assert not (package / "tracing.py").exists(), "not the tree from before tracing"
        rates = old.measure(
            single_node_url, make_jobs(JOBS), make_jobs(JOBS), AGENT_TYPE, CONCURRENCY
        )
    assert sorted(rates) == sorted(PHASES)
    assert all(rate > 0 for rate in rates.values()), rates
    assert not package.exists(), "the archived tree outlived the context"


def test_an_unknown_revision_is_a_clear_error() -> None:
    with (
        pytest.raises(OldRevisionError, match=r"git archive 0{40} failed|cannot run git"),
        OldRevision("0" * 40),
    ):
        pass


@needs_git
def test_the_table_has_every_side_and_a_verdict_per_phase(single_node_url: str) -> None:
    provider = TracerProvider()
    exporter = DroppingExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    url = single_node_url
    try:
        with OldRevision() as old:
            sides: dict[str, Measure] = {
                "old": lambda single, many: old.measure(url, single, many, AGENT_TYPE, CONCURRENCY),
                "off": lambda single, many: measure(url, single, many, AGENT_TYPE, CONCURRENCY),
                "on": lambda single, many: measure(
                    url, single, many, AGENT_TYPE, CONCURRENCY, provider
                ),
            }
            results = run_rounds(sides, JOBS, 2)
    finally:
        provider.shutdown()
    assert exporter.spans > 0, "the SDK side exported no span"
    printed = render(results, "header").splitlines()
    assert printed[1].split() == [
        "operation", "old", "jobs/s", "off", "jobs/s", "on", "jobs/s", "on/off", "off/old",
    ]  # fmt: skip
    for phase in PHASES:
        (row,) = [line for line in printed if line.startswith(f"{phase} ")]
        values = [_number(cell) for cell in re.findall(NUMBER, row[len(phase) :])]
        assert len(values) == 5 and all(value > 0 for value in values), row
    verdicts = printed[-1].removeprefix("off within 5% of old (off/old jobs/s): ").split("; ")
    assert [verdict.split()[0] for verdict in verdicts] == list(PHASES), printed[-1]
    for verdict in verdicts:
        assert re.fullmatch(rf"[a-z_]+ {NUMBER} >= 0\.95 (met|MISSED)", verdict), verdict


def test_rounds_rotate_the_order_of_the_sides() -> None:
    calls: list[str] = []

    def side(name: str) -> Measure:
        def run(single: list[dict[str, Any]], many: list[dict[str, Any]]) -> dict[str, float]:
            assert len(single) == len(many) == 3
            calls.append(name)
            return dict.fromkeys(PHASES, 1.0)

        return run

    results = run_rounds({name: side(name) for name in ("old", "off", "on")}, 3, 4)
    assert calls == [
        *("old", "off", "on"), *("off", "on", "old"), *("on", "old", "off"), *("old", "off", "on"),
    ]  # fmt: skip
    assert all(len(rates) == 4 for by_side in results.values() for rates in by_side.values())


def _results(old: float, off: float) -> dict[str, Rates]:
    return {
        "old": {phase: [old, old, 1.0] for phase in PHASES},
        "off": {phase: [off, off, 1.0] for phase in PHASES},
        "on": {phase: [off, off, 1.0] for phase in PHASES},
    }


def test_off_within_5_percent_of_old_is_met_at_0_95_and_missed_below() -> None:
    assert target(_results(100.0, 95.0), "drain") == (0.95, True)
    ratio, met = target(_results(100.0, 94.9), "drain") or (0.0, True)
    assert ratio == pytest.approx(0.949) and not met
    assert "drain 0.949 >= 0.95 MISSED" in render(_results(100.0, 94.9), "h")


def test_without_old_there_is_no_old_column_and_no_verdict() -> None:
    results = _results(100.0, 95.0)
    del results["old"]
    assert target(results, "drain") is None
    printed = render(results, "h").splitlines()
    assert printed[1].split() == ["operation", "off", "jobs/s", "on", "jobs/s", "on/off"]
    assert len(printed) == 2 + len(PHASES)
