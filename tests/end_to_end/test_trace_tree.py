"""`python -m demo.trace_tree` as a user runs it: its own redis-server, one job that fails
once and then succeeds, and its trace printed as a tree (the README's example)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.paths import REPO_ROOT


def test_the_tree_holds_the_send_span_each_attempt_and_its_settle_span() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "demo.trace_tree"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (trace_id,) = re.fullmatch(r"trace ([0-9a-f]{32})", lines[0]).groups()  # type: ignore[union-attr]
    shape = [re.match(r"( *)(\S+ \S+ \[\w+\])", line).groups() for line in lines[1:]]  # type: ignore[union-attr]
    assert shape == [
        ("", "plan trip [INTERNAL]"),
        ("  ", "send dining [PRODUCER]"),
        ("    ", "process dining [CONSUMER]"),
        ("      ", "retry dining [CLIENT]"),
        ("    ", "process dining [CONSUMER]"),
        ("      ", "complete dining [CLIENT]"),
    ]
    first, second = lines[3], lines[5]
    assert "job.attempt=1 job.outcome=retrying error.type=RuntimeError status=ERROR" in first
    assert "event=exception" in first and "links=1" in first
    assert "job.attempt=2 job.outcome=succeeded status=UNSET" in second
    # The worker's log line for the failed attempt names the same trace.
    assert f"trace_id={trace_id}" in done.stderr


def test_help_describes_the_run_and_starts_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "demo.trace_tree", "--help"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m demo.trace_tree")
    assert "one job's trace across the queue" in done.stdout
    assert "[PRODUCER]" not in done.stdout  # the demo did not run
    bad = subprocess.run(
        [sys.executable, "-m", "demo.trace_tree", "--no-such-option"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr
