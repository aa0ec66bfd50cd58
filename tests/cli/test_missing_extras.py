"""The entry points of the optional extras, run where the extra is not installed: one line
naming the extra and exit 2, as `agentjobs` does for its `cli` extra, never a traceback.

"Not installed" is a `sitecustomize` on PYTHONPATH that makes the extra's modules
unimportable, so the very commands a user types run unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.runner import ROOT, child_env

SCRIPTS = Path(sys.executable).parent
EXPORTER_EXTRA = (
    "error: `queue-exporter` needs the 'exporter' extra (no module 'fastapi'): "
    "pip install 'platform-common-jobs[exporter]'"
)
MONITORING_EXTRA = (
    "error: `python -m platform_common.jobs_monitoring` needs the 'monitoring' extra "
    "(no module 'grafanalib'): pip install 'platform-common-jobs[monitoring]'"
)


def without(
    tmp_path: Path, modules: tuple[str, ...], *command: str
) -> subprocess.CompletedProcess[str]:
    """Run `command` in a Python where importing any of `modules` fails."""
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nsys.modules.update(dict.fromkeys({modules!r}))\n"
    )
    env = child_env({"PYTHONPATH": f"{tmp_path}:{ROOT}"})
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("command", "modules", "expected"),
    [
        ((str(SCRIPTS / "queue-exporter"), "--help"), ("fastapi",), EXPORTER_EXTRA),
        ((sys.executable, "-m", "platform_common.jobs_exporter"), ("fastapi",), EXPORTER_EXTRA),
        (
            (sys.executable, "-m", "platform_common.jobs_monitoring", "--help"),
            ("grafanalib",),
            MONITORING_EXTRA,
        ),
    ],
    ids=["queue-exporter", "python -m jobs_exporter", "python -m jobs_monitoring"],
)
def test_a_missing_extra_is_one_line_and_exit_2(
    tmp_path: Path, command: tuple[str, ...], modules: tuple[str, ...], expected: str
) -> None:
    done = without(tmp_path, modules, *command)
    assert (done.returncode, done.stderr, done.stdout) == (2, expected + "\n", "")


def test_the_blocker_blocks_and_the_entry_points_run_with_their_extras(tmp_path: Path) -> None:
    blocked = without(tmp_path, ("fastapi",), sys.executable, "-c", "import fastapi")
    assert "ModuleNotFoundError" in blocked.stderr
    exporter = without(tmp_path, (), str(SCRIPTS / "queue-exporter"), "--help")
    assert exporter.returncode == 0, exporter.stderr
    assert "--redis-url" in exporter.stdout
    monitoring = without(
        tmp_path, (), sys.executable, "-m", "platform_common.jobs_monitoring", "-h"
    )
    assert monitoring.returncode == 0, monitoring.stderr
    assert "--out" in monitoring.stdout
