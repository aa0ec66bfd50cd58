"""Start the demo's servers as children of a `ProcessGroup`: redis-server, the exporter,
the workers, Prometheus and Alertmanager, each on 127.0.0.1 and ready before it returns."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
import yaml

from .processes import Child, DemoError, ProcessGroup

__all__ = [
    "REDIS_CONF",
    "start_alertmanager",
    "start_exporter",
    "start_prometheus",
    "start_redis",
    "start_workers",
]

# The Redis settings compose.yaml and the Kubernetes example use too (AOF everysec,
# noeviction). The demo keeps the default user (every process here is the operator's),
# so its ACL file holds only that user.
REDIS_CONF = Path(__file__).resolve().parent.parent / "deploy" / "redis" / "redis.conf"
DEMO_ACL = "user default on nopass ~* &* +@all\n"
HANDLER = "demo.handlers:research"


def _binary(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise DemoError(f"{name} is not installed: run `make deps` (apt-get install {package})")
    return path


def start_redis(group: ProcessGroup, directory: Path, port: int) -> str:
    """redis-server with deploy/redis/redis.conf included; returns its URL."""
    directory.mkdir()
    acl_file = directory / "users.acl"
    acl_file.write_text(DEMO_ACL)
    child = group.start("redis-server", [
        _binary("redis-server", "redis-server"), "--include", str(REDIS_CONF),
        "--aclfile", str(acl_file), "--bind", "127.0.0.1", "--port", str(port),
        "--dir", str(directory), "--save", "", "--daemonize", "no",
    ])  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    group.wait_ready(child, lambda: _redis_answers(url), timeout=15)
    return url


def _redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=1)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
        return False
    finally:
        client.close()


def start_exporter(
    group: ProcessGroup, redis_url: str, port: int, agent_types: Sequence[str]
) -> str:
    """The queue exporter; returns its base URL."""
    child = group.start("exporter", [
        sys.executable, "-m", "platform_common.jobs_exporter", "--redis-url", redis_url,
        "--host", "127.0.0.1", "--port", str(port), "--agent-types", ",".join(agent_types),
        "--log-level", "WARNING",
    ])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    group.wait_ready(child, f"{url}/readyz")
    return url


def start_workers(
    group: ProcessGroup, redis_url: str, agent_types: Sequence[str], per_type: int
) -> list[Child]:
    """`per_type` worker processes per agent type, running the demo handler."""
    workers = []
    for agent_type in agent_types:
        for index in range(per_type):
            workers.append(group.start(f"worker-{agent_type}-{index}", [
                sys.executable, "-m", "platform_common.jobs.worker", "--redis-url", redis_url,
                "--agent-type", agent_type, "--handler", HANDLER, "--concurrency", "10",
                "--log-level", "WARNING",
            ]))  # fmt: skip
    return workers


def prometheus_config(
    *, job: str, exporter: str, rule_file: Path, alertmanager: str, scrape_interval: str
) -> dict[str, Any]:
    """Scrape the exporter as `job` (the site's), evaluate `rule_file`, alert `alertmanager`."""
    return {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
        "rule_files": [str(rule_file)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [exporter]}]}],
    }


def start_prometheus(
    group: ProcessGroup, directory: Path, port: int, config: dict[str, Any]
) -> str:
    """Prometheus with `config` (see `prometheus_config`); returns its base URL."""
    directory.mkdir()
    config_path = directory / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    child = group.start("prometheus", [
        _binary("prometheus", "prometheus"), f"--config.file={config_path}",
        f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    group.wait_ready(child, f"{url}/-/ready")
    return url


EXAMPLE_ALERTMANAGER = Path(__file__).resolve().parents[1] / "alerts/alertmanager/alertmanager.yml"


def alertmanager_config(webhook_url: str, *, group_wait: str) -> dict[str, Any]:
    """Demo only: every alert to the demo's webhook receiver (the example config in
    alerts/alertmanager/ routes by severity and action to real receivers instead)."""
    return {
        "route": {
            "receiver": "demo-webhook",
            "group_by": ["alertname", "agent_type", "instance", "node"],
            "group_wait": group_wait,
            "group_interval": "5s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "demo-webhook",
                "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
            }
        ],
        # The example's (an SLO's page covers its ticket, the exporter down every other).
        "inhibit_rules": yaml.safe_load(EXAMPLE_ALERTMANAGER.read_text())["inhibit_rules"],
    }


def start_alertmanager(
    group: ProcessGroup, directory: Path, port: int, config: dict[str, Any]
) -> str:
    """Alertmanager with `config`, clustering off; returns its base URL."""
    directory.mkdir()
    config_path = directory / "alertmanager.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    binary = "prometheus-alertmanager"
    child = group.start("alertmanager", [
        _binary(binary, binary), f"--config.file={config_path}",
        f"--storage.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # one instance: no gossip port bound
        "--log.level=warn",
    ])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    group.wait_ready(child, f"{url}/-/ready")
    return url
