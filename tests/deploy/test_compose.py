"""compose.yaml against the Compose specification's JSON schema (vendored by
check-jsonschema), and wired to the files it claims to mount."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import yaml

from deploy.kubernetes.render_workers import AGENT_TYPES
from tests.support.paths import REPO_ROOT

COMPOSE = REPO_ROOT / "compose.yaml"


def test_compose_file_passes_the_compose_spec_schema() -> None:
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(COMPOSE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_stack_is_complete_and_mounts_what_exists() -> None:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    expected = {"redis", "exporter", "prometheus", "alertmanager", "grafana"}
    assert expected | {f"worker-{t}" for t in AGENT_TYPES} <= set(services)
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO_ROOT / source).exists(), f"{name} mounts missing {source}"
    assert "/usr/local/etc/redis/queue.conf" in services["redis"]["command"]
    assert services["grafana"]["image"].startswith("grafana/grafana:11.")
