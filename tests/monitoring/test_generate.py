"""Generation: the committed files are the defaults' bundle, `--check` catches any drift, and
a site file reaches every output at once (Grafana, Prometheus, promtool tests, runbooks)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.generate import bundle, generate
from platform_common.jobs_monitoring.site import load_config
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "scripts/generate.py"


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # No inherited environment: the output depends on the files and flags only.
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def write_site(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return path


def files_under(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


# -- the committed files -------------------------------------------------------------


def test_generated_files_are_fresh() -> None:
    result = run_script(ROOT / SCRIPT, "--check")
    assert result.returncode == 0, result.stderr


def test_the_committed_files_are_the_defaults_bundle() -> None:
    files = bundle(load_config())
    assert len(files) > 10
    for relative, text in files.items():
        assert (ROOT / relative).read_text() == text, relative


def test_check_reports_stale_files_and_writes_nothing(tmp_path: Path) -> None:
    # A copy of the generated tree, so the shared working tree is never touched; the
    # script generates from the installed package into its own repository root.
    for name in ("alerts", "dashboards", "runbooks", "scripts", "deploy"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs/reference.md", tmp_path / "docs/reference.md")
    worker = tmp_path / "deploy/kubernetes/workers/dining.yaml"
    worker.write_text(worker.read_text().replace("maxReplicaCount: 20", "maxReplicaCount: 30"))
    (tmp_path / "deploy/kubernetes/workers/dropped.yaml").write_text("kind: Deployment\n")
    rules = tmp_path / outputs.PROMETHEUS_RULES
    rules.write_text(rules.read_text().replace("> 100", "> 99"))
    (tmp_path / "runbooks/RemovedAlert.md").write_text("# RemovedAlert\n")
    reference = tmp_path / "docs/reference.md"
    reference.write_text(reference.read_text().replace("| `queue_depth` |", "| `queue_depht` |"))
    before = files_under(tmp_path)
    result = run_script(tmp_path / SCRIPT, "--check")
    assert result.returncode == 1
    assert f"stale: {outputs.PROMETHEUS_RULES}" in result.stderr
    assert "stale: docs/reference.md" in result.stderr
    assert "stale: runbooks/RemovedAlert.md" in result.stderr
    assert "stale: runbooks/QueueIdle.md" not in result.stderr
    assert "stale: deploy/kubernetes/workers/dining.yaml" in result.stderr
    assert "stale: deploy/kubernetes/workers/dropped.yaml" in result.stderr
    assert "stale: deploy/kubernetes/workers/dmc.yaml" not in result.stderr
    assert files_under(tmp_path) == before


# -- a bundle elsewhere ----------------------------------------------------------------


def test_out_dir_gets_the_whole_bundle_and_no_readme(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    written = generate(None, out, check=False)
    assert sorted(written) == sorted(bundle(load_config()))
    assert {name: data.decode() for name, data in files_under(out).items()} == {
        name: (ROOT / name).read_text() for name in written
    }
    assert generate(None, out, check=True) == []


def test_orphan_pages_are_reported_by_check_and_removed_by_generate(tmp_path: Path) -> None:
    generate(None, tmp_path, check=False)
    orphan = tmp_path / outputs.RUNBOOKS_DIR / "RemovedAlert.md"
    orphan.write_text("# RemovedAlert\n")
    assert generate(None, tmp_path, check=True) == ["runbooks/RemovedAlert.md"]
    assert orphan.exists()
    assert generate(None, tmp_path, check=False) == ["runbooks/RemovedAlert.md"]
    assert not orphan.exists()


def test_script_takes_site_and_out(tmp_path: Path) -> None:
    site = write_site(tmp_path, "grafana_folder: Platform queues\n")
    out = tmp_path / "bundle"
    result = run_script(ROOT / SCRIPT, "--site", str(site), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {outputs.GRAFANA_ALERT_RULES}" in result.stdout
    assert not (out / "README.md").exists()
    rules = yaml.safe_load((out / outputs.GRAFANA_ALERT_RULES).read_text())
    assert rules["groups"][0]["folder"] == "Platform queues"
    check = ("--out", str(out), "--check")
    assert run_script(ROOT / SCRIPT, "--site", str(site), *check).returncode == 0
    assert run_script(ROOT / SCRIPT, *check).returncode == 1  # the defaults differ


def test_script_names_a_bad_key_and_writes_nothing(tmp_path: Path) -> None:
    site = write_site(tmp_path, "queue_depth_high: lots\n")
    out = tmp_path / "bundle"
    result = run_script(ROOT / SCRIPT, "--site", str(site), "--out", str(out))
    assert result.returncode == 2
    assert "queue_depth_high" in result.stderr and "an integer" in result.stderr
    assert not out.exists()


# -- one threshold, every output ------------------------------------------------------


def _rule(document: Any, name: str, key: str) -> dict[str, Any]:
    [rule] = [r for group in document["groups"] for r in group["rules"] if r.get(key) == name]
    found: dict[str, Any] = rule
    return found


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_a_site_threshold_changes_every_output_together(tmp_path: Path) -> None:
    site = write_site(tmp_path, "queue_depth_high: 250\n")
    out = tmp_path / "bundle"
    changed = generate(site, out, check=False)
    defaults = bundle(load_config())
    differing = {name for name, text in bundle(load_config(site)).items() if defaults[name] != text}
    assert differing == {
        outputs.DASHBOARD_FILE,
        outputs.GRAFANA_ALERT_RULES,
        outputs.PROMETHEUS_RULES,
        outputs.PROMETHEUS_RULE_TESTS,
        "runbooks/QueueDepthHigh.md",
        "runbooks/README.md",
        f"{outputs.RUNBOOK_SITE_DIR}/QueueDepthHigh.html",
        f"{outputs.RUNBOOK_SITE_DIR}/index.html",
    }
    assert differing <= set(changed)

    grafana = _rule(yaml.safe_load((out / outputs.GRAFANA_ALERT_RULES).read_text()),
                    "QueueDepthHigh", "title")  # fmt: skip
    assert grafana["data"][2]["model"]["conditions"][0]["evaluator"]["params"] == [250]
    assert "(threshold 250)" in grafana["annotations"]["summary"]

    prometheus = _rule(yaml.safe_load((out / outputs.PROMETHEUS_RULES).read_text()),
                       "QueueDepthHigh", "alert")  # fmt: skip
    assert prometheus["expr"].endswith(" > 250")

    # The promtool cases moved with it: 251 fires, 250 stays quiet, and promtool agrees.
    tests = (out / outputs.PROMETHEUS_RULE_TESTS).read_text()
    assert "251x30" in tests and "250x30" in tests and "101x30" not in tests
    result = promtool("test", "rules", str(out / outputs.PROMETHEUS_RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr

    page = (out / "runbooks/QueueDepthHigh.md").read_text()
    assert "`> 250` for `5m`" in page and "> 100" not in page
    assert "More than 250 jobs" in page

    board = json.loads((out / outputs.DASHBOARD_FILE).read_text())
    depth = next(p for p in board["panels"] if p["title"] == "Queue depth per agent type")
    assert [s["value"] for s in depth["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [
        None,
        250,
    ]
