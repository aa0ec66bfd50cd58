"""Run the operator CLIs as operators do, in child processes, and read their failure reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.paths import REPO_ROOT as ROOT
from tests.support.redis_server import find_free_port

__all__ = [
    "DEAD_REDIS", "ROOT", "Ran", "child_env", "one_error_line", "one_line_failure", "run",
    "table_row",
]  # fmt: skip

# Nothing listens there: "Redis unreachable" without waiting for a timeout.
DEAD_REDIS = f"redis://127.0.0.1:{find_free_port()}/0"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without the settings the commands read, plus `extra`."""
    own = ("QUEUE_", "JOB_STORE_", "JOBSTATE_", "REDIS_URL", "OTEL_", "AGENTJOBS_", "EXPORTER_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(own)}
    return {**base, "PYTHONPATH": str(ROOT), **(extra or {})}


def run(
    *args: str,
    env: Mapping[str, str] | None = None,
    module: str = "platform_common.jobs",
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, env=child_env(env), capture_output=True, text=True, timeout=60, input=stdin,
    )  # fmt: skip


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The failure report: stderr ends with exactly one `error:` line, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
    return errors[0]


def one_line_failure(
    done: subprocess.CompletedProcess[str], *, host: str, password: str, after: str = ""
) -> str:
    """A start-up failure as a CLI should report one: exit non-zero, stderr exactly one non-empty
    line (after the lines starting with `after`, e.g. the backfill's target) naming
    `host`, never `password`, no traceback. Returns the line."""
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr and password not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if after:
        lines = [line for line in lines if not line.startswith(after)]
    assert len(lines) == 1, done.stderr
    assert host in lines[0] and "error:" in lines[0], lines[0]
    return lines[0]


@dataclass
class Ran:
    """What a command run in this process (the `agentjobs` fixture) left."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


def table_row(table: str, first_cell: str) -> list[str]:
    """The cells of the row of a rich table whose first cell is `first_cell`."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").strip("│ ").split("│")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{table}")
