"""compose.yaml against the Compose specification's JSON schema (vendored by
check-jsonschema), and wired to the files it claims to mount and to the host names the
configs it mounts use."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit

import yaml

from platform_common.jobs.queue import DEFAULT_AGENT_TYPES as AGENT_TYPES
from platform_common.jobs.queue import QueueSettings
from tests.support.paths import REPO_ROOT

COMPOSE = REPO_ROOT / "compose.yaml"
SERVICES: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]


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
    expected = {"redis", "queue-exporter", "prometheus", "alertmanager", "grafana"}
    assert expected | {f"worker-{t}" for t in AGENT_TYPES} <= set(SERVICES)
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO_ROOT / source).exists(), f"{name} mounts missing {source}"
    assert "/usr/local/etc/redis/queue.conf" in SERVICES["redis"]["command"]
    assert SERVICES["grafana"]["image"].startswith("grafana/grafana:11.")


def _host(address: str) -> str:
    return (urlsplit(address).hostname if "//" in address else address.split(":")[0]) or ""


def test_every_host_a_mounted_config_names_is_a_service() -> None:
    # On the stack's network a service is reached by its name: a scrape target, an
    # Alertmanager or a datasource under any other name never resolves (the stack would
    # come up and page QueueExporterDown).
    prometheus = yaml.safe_load((REPO_ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = [t for job in prometheus["scrape_configs"] for s in job["static_configs"]
               for t in s["targets"]]  # fmt: skip
    managers = [t for m in prometheus["alerting"]["alertmanagers"] for s in m["static_configs"]
                for t in s["targets"]]  # fmt: skip
    provisioning = REPO_ROOT / "alerts/grafana/provisioning/datasources"
    datasources = [d["url"] for f in sorted(provisioning.glob("*.yaml"))
                   for d in yaml.safe_load(f.read_text())["datasources"]]  # fmt: skip
    assert targets and managers and datasources
    for address in [*targets, *managers, *datasources]:
        assert _host(address) in SERVICES, f"{address}: no compose service of that name"
    for name, service in SERVICES.items():
        url = service.get("environment", {}).get("REDIS_URL")
        if url is not None:
            assert _host(url) == "redis", name


def test_each_worker_runs_its_type_as_its_own_acl_user() -> None:
    for agent_type in AGENT_TYPES:
        service = SERVICES[f"worker-{agent_type}"]
        command = service["command"]
        assert command[command.index("--agent-type") + 1] == agent_type
        url = urlsplit(re.sub(r"\$\{[^}]*\}", "password", service["environment"]["REDIS_URL"]))
        assert url.username == f"worker-{agent_type}"
        # SIGTERM, then the worker's own shutdown (QUEUE_SHUTDOWN_TIMEOUT, its default
        # here), then SIGKILL: the grace period outlasts the worker's timeout.
        grace = int(service["stop_grace_period"].removesuffix("s"))
        assert grace > QueueSettings.from_env({}).shutdown_timeout
