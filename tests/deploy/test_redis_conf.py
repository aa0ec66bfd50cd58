"""deploy/redis/redis.conf on a real redis-server: it starts with the ACL file that
compose.yaml's `redis-acl` service writes (that very script, run here), sets what the
queue needs, and every user the stack's URLs name gets in. The demo, compose and the
Kubernetes example all use this one file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
import yaml

from demo.servers import REDIS_CONF
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer
from tests.support.sync_redis import sync_reply

CONF = REPO_ROOT / "deploy" / "redis" / "redis.conf"
COMPOSE: dict[str, Any] = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
# The test's own admin instead of the stack's `default off`: CONFIG GET needs one.
ADMIN = "user default on nopass ~* &* +@all"


def _settings() -> dict[str, str]:
    lines = [line.split(None, 1) for line in CONF.read_text().splitlines()]
    return {words[0]: words[1] for words in lines if words and not words[0].startswith("#")}


def _compose_default(value: str) -> str:
    """`${NAME:-default}` as compose resolves it when NAME is unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_the_fragment_says_what_the_queue_needs() -> None:
    assert _settings() == {
        "appendonly": "yes",
        "appendfsync": "everysec",
        "maxmemory-policy": "noeviction",
        "aclfile": "/etc/redis/users.acl",
    }


def test_demo_compose_and_kubernetes_use_it() -> None:
    assert REDIS_CONF == CONF  # make demo's redis-server includes it
    volumes = COMPOSE["services"]["redis"]["volumes"]
    assert "./deploy/redis/redis.conf:/usr/local/etc/redis/queue.conf:ro" in volumes
    assert "redis-acl:/etc/redis:ro" in volumes  # where its aclfile points
    kubernetes = (REPO_ROOT / "deploy" / "kubernetes" / "redis.yaml").read_text()
    assert "--from-file=queue.conf=deploy/redis/redis.conf" in kubernetes


def _compose_acl_file(tmp_path: Path) -> str:
    service = COMPOSE["services"]["redis-acl"]
    [shell, flags, script] = service["command"]
    assert (shell, flags) == ("sh", "-ec")
    # Compose turns $$ into $; the file goes to tmp_path instead of the volume.
    script = script.replace("$$", "$").replace("/etc/redis/users.acl", str(tmp_path / "users.acl"))
    environment = {k: _compose_default(str(v)) for k, v in service["environment"].items()}
    # `agentjobs` as the image has it: the console script beside this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    subprocess.run(
        ["sh", "-ec", script], env={**os.environ, **environment, "PATH": path},
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    return (tmp_path / "users.acl").read_text()


def test_redis_runs_the_fragment_with_the_stack_users(tmp_path: Path) -> None:
    written = _compose_acl_file(tmp_path)
    first, *users = written.splitlines()
    assert first == "user default off"  # nobody gets in without a user of their own
    (tmp_path / "users.acl").write_text("\n".join([ADMIN, *users]) + "\n")
    # The fragment first (as compose and the StatefulSet pass it), host settings after.
    extra = ["--include", str(CONF), "--aclfile", str(tmp_path / "users.acl")]
    with RedisServer(extra_args=extra) as server:
        for name, value in (
            ("appendonly", "yes"),
            ("appendfsync", "everysec"),
            ("maxmemory-policy", "noeviction"),
        ):
            assert server.cli("CONFIG", "GET", name).splitlines() == [name, value]
        # Every URL of the stack (and the healthcheck's user) authenticates.
        services = COMPOSE["services"]
        urls = [
            _compose_default(s["environment"]["REDIS_URL"])
            for s in services.values()
            if "REDIS_URL" in s.get("environment", {})
        ]
        credentials = {(urlsplit(u).username, urlsplit(u).password) for u in urls}
        health = _compose_default(str(services["redis"]["environment"]["PRODUCER_PASSWORD"]))
        credentials.add(("producer", health))
        assert len(credentials) == 2 + len([s for s in services if s.startswith("worker-")])
        for username, password in sorted(credentials, key=str):
            client = redis.Redis(port=server.port, username=username, password=password)
            try:
                assert sync_reply(client.ping()), username
            finally:
                client.close()
