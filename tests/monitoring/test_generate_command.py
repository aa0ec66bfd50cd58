"""`python -m platform_common.jobs_monitoring`: the generators' own entry point, run as a
platform team would from an installed wheel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "platform_common.jobs_monitoring", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_check_passes_on_the_repository() -> None:
    done = generate("--check", "--out", str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"up to date: {REPO_ROOT}\n"


def test_writes_a_bundle_then_check_passes(tmp_path: Path) -> None:
    stale = generate("--check", "--out", str(tmp_path))
    assert stale.returncode == 1
    assert "stale: dashboards/queue-overview.json" in stale.stderr
    assert stale.stderr.splitlines()[-1].startswith("error: ")
    assert not any(tmp_path.iterdir())  # --check wrote nothing
    wrote = generate("--out", str(tmp_path))
    assert wrote.returncode == 0, wrote.stderr
    assert "wrote dashboards/queue-overview.json" in wrote.stdout
    assert generate("--check", "--out", str(tmp_path)).returncode == 0


def test_bad_site_settings_are_one_line_and_exit_2(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("no_such_setting: 1\n")
    bad = generate("--check", "--site", str(site), "--out", str(tmp_path))
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: site settings: ")
