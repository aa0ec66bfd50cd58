"""Servers that refuse the CLIs: a wrong password, a user without rights, a TLS mismatch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from platform_common.jobs import acl
from tests.support.redis_server import RedisServer

ADMIN_PASSWORD = "admin-pw-cli-refusals-41d0"
WRONG_PASSWORD = "wrong-pw-cli-refusals-9a7e"
DINING_WORKER_PASSWORD = "dining-worker-pw-cli-0b3c"


@pytest.fixture(scope="package")
def refusing_redis() -> Iterator[RedisServer]:
    """`admin` may do anything; `dining-worker` is a worker scoped to `dining` alone."""
    worker = acl.acl_file_line(
        "dining-worker", DINING_WORKER_PASSWORD, "worker", agent_types=["dining"],
        store_agents=["dining-agent"],
    )  # fmt: skip
    users = [f"admin on >{ADMIN_PASSWORD} ~* &* +@all", "default off"]
    server = RedisServer(acl_users=[*users, worker.removeprefix("user ")]).start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="package")
def tls_redis() -> Iterator[RedisServer]:
    server = RedisServer(tls=True).start()
    try:
        yield server
    finally:
        server.cleanup()
