"""`make demo` shows the whole alert loop, and Ctrl-C leaves nothing running.

The demo runs as a user runs it (`python -m demo`, a subprocess), with `--fast` so its
DeadLetterDepthHigh fires within seconds rather than minutes (scrape and evaluation
every 1 s, more than 3 dead jobs for 5 s, the failing phase 15 s in: the only
differences from `make demo`) and `--free-ports` so it never competes for 9090 and
friends. Its own output is the evidence: the webhook receiver's lines for the alerts,
which have travelled redis -> exporter -> Prometheus (the generated rules) ->
Alertmanager -> receiver, among them the SLO page its failing phase burns the budget for.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ALERT_LINE = re.compile(r"^ALERT FIRING DeadLetterDepthHigh agent_type=(?P<type>\w+)")
RUNBOOK_LINE = re.compile(
    r"^\s+runbook: (?P<url>http://127\.0\.0\.1:\d+/DeadLetterDepthHigh\.html)$"
)
AGENTJOBS_LINE = re.compile(r"^try:\s+(?P<command>.+ info .+)$")
FAILING_LINE = re.compile(r"^FAILING PHASE: the flights upstream is down")
SLO_ALERT_LINE = re.compile(r"^ALERT FIRING JobAvailabilityBudgetBurnFast agent_type=flights ")
SLO_RUNBOOK_LINE = re.compile(
    r"^\s+runbook: (?P<url>http://127\.0\.0\.1:\d+/JobAvailabilityBudgetBurnFast\.html)$"
)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgrp: int
    state: str
    start_time: int
    """Clock ticks after boot: tells a process from a later one given the same pid."""


def process_table() -> dict[int, ProcessInfo]:
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited while we looked
        # The command name sits in parentheses and may hold spaces or ')': split after it.
        fields = text.rpartition(")")[2].split()
        pid = int(stat.parent.name)
        table[pid] = ProcessInfo(pid, int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    return table


def descendants(root: int) -> list[ProcessInfo]:
    table = process_table()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [info for info in table.values() if info.ppid == parent]
        found += children
        frontier += [child.pid for child in children]
    return found


def still_running(started: list[ProcessInfo]) -> list[ProcessInfo]:
    """Those of `started` alive now (not zombies), and anything left in their groups."""
    groups = {info.pid for info in started}
    alive = []
    for info in process_table().values():
        if info.state == "Z":
            continue
        was_started = any(info.pid == s.pid and info.start_time == s.start_time for s in started)
        if was_started or info.pgrp in groups:
            alive.append(info)
    return alive


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


class Output:
    """The demo's stdout and stderr, read line by line on a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self._process = process
        self._stream = process.stdout
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> tuple[int, re.Match[str]]:
        """The index and match of the first line matching `pattern` (poll with a deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self._process.poll() is not None
            if exited:
                self._thread.join(timeout=5)  # the rest of its output
            lines = self.snapshot()
            for index, line in enumerate(lines):
                if match := pattern.search(line):
                    return index, match
            if exited or time.monotonic() >= deadline:
                tail = "\n".join(lines[-40:])
                raise AssertionError(f"no line matching {pattern.pattern!r}; output:\n{tail}")
            time.sleep(0.1)

    def join(self, timeout: float) -> bool:
        """True once the demo's output has ended (every writer to the pipe has exited)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


@dataclass(frozen=True, slots=True)
class DemoRun:
    process: subprocess.Popen[str]
    started: list[ProcessInfo]
    """Every process the demo started, once the test has recorded them."""


@pytest.fixture
def demo() -> Iterator[DemoRun]:
    process = subprocess.Popen(
        [sys.executable, "-m", "demo", "--fast", "--free-ports", "--seconds", "300"],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = DemoRun(process, [])
    try:
        yield run
    finally:
        # Only after a failed test: never leave the demo or its servers behind.
        if process.poll() is None:
            process.kill()
            process.wait()
        for info in still_running(run.started):
            os.kill(info.pid, signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_demo_alert_reaches_the_receiver_and_ctrl_c_stops_everything(
    demo: DemoRun,
) -> None:
    output = Output(demo.process)
    alert_at, alert = output.wait_for(ALERT_LINE, timeout=150)
    lines = output.snapshot()
    # The alert's own lines: its summary, then its runbook on the demo's runbook site.
    runbook = RUNBOOK_LINE.search(lines[alert_at + 2]) if len(lines) > alert_at + 2 else None
    assert runbook is not None, "\n".join(lines[alert_at:])
    assert f"{alert['type']} jobs are dead-lettered (threshold 3)" in lines[alert_at + 1]

    # Everything the demo started, recorded while it runs: its real servers are among them.
    demo.started.extend(descendants(demo.process.pid))
    commands = [command_line(info.pid) for info in demo.started]
    # redis-server rewrites its title: "redis-server 127.0.0.1:port".
    programs = {Path(command[0].split()[0]).name for command in commands if command}
    assert {"redis-server", "prometheus", "prometheus-alertmanager"} <= programs, commands
    workers = [command for command in commands if "platform_common.jobs.worker" in command]
    assert len(workers) == 4, commands

    with urllib.request.urlopen(runbook["url"], timeout=10) as response:
        page = response.read().decode()
    assert response.status == 200 and "DeadLetterDepthHigh" in page

    # The printed `agentjobs info` line works as printed, and sees what the alert says.
    _, agentjobs = output.wait_for(AGENTJOBS_LINE, timeout=0)
    info = subprocess.run(
        [*shlex.split(agentjobs["command"]), "--output", "json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert info.returncode == 0, info.stderr
    [dead_type] = [t for t in json.loads(info.stdout)["types"] if t["agent_type"] == alert["type"]]
    assert dead_type["dead"] > 3 and dead_type["active_workers"] == 2, dead_type

    # The failing phase burns flights' error budget fast enough to page, after it began.
    failing_at, _ = output.wait_for(FAILING_LINE, timeout=60)
    slo_at, _ = output.wait_for(SLO_ALERT_LINE, timeout=90)
    lines = output.snapshot()
    assert slo_at > failing_at, "\n".join(lines[: slo_at + 3])
    assert "(severity=critical)" in lines[slo_at]
    assert "flights burns its availability error budget" in lines[slo_at + 1]
    slo_runbook = SLO_RUNBOOK_LINE.search(lines[slo_at + 2])
    assert slo_runbook is not None, "\n".join(lines[slo_at:])
    with urllib.request.urlopen(slo_runbook["url"], timeout=10) as response:
        page = response.read().decode()
    assert "The error budget" in page and "14.4x" in page
    # dining fails within its own (demo) objective: no page for it.
    assert not [line for line in lines if "BudgetBurnFast agent_type=dining" in line]

    demo.process.send_signal(signal.SIGINT)
    assert demo.process.wait(timeout=60) == 0, "\n".join(output.snapshot()[-30:])
    # The pipe closes only when every process holding it has exited.
    assert output.join(timeout=30)
    assert output.snapshot()[-1] == "stopped everything the demo started"
    assert still_running(demo.started) == []
