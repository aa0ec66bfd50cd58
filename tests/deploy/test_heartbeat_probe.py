"""The workers' liveness probe against a real worker on a real redis-server, connected as
the least-privilege worker ACL user the Kubernetes example gives it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from platform_common.jobs import acl
from platform_common.jobs.heartbeat_probe import check, main
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import QueueSettings
from platform_common.jobs.queue.builtin import noop
from platform_common.jobs.worker import Worker
from tests.support.redis_server import RedisServer
from tests.support.sync_redis import sync_reply

PASSWORD = "probe-secret"
WORKER_ID = "dining-worker-0"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    # A server of its own: one test stops it. The worker user is scoped to dining only.
    line = acl.acl_file_line("worker", PASSWORD, "worker", agent_types=["dining"])
    admin_line = "default on nopass ~* &* +@all"
    with RedisServer(acl_users=[line.removeprefix("user "), admin_line]) as started:
        yield started


@pytest.fixture
def settings(server: RedisServer) -> QueueSettings:
    return QueueSettings.from_url(f"redis://worker:{PASSWORD}@127.0.0.1:{server.port}/0")


@pytest.fixture
async def worker(settings: QueueSettings) -> AsyncIterator[Worker]:
    running = Worker(settings, "dining", noop, worker_id=WORKER_ID)
    task = asyncio.create_task(running.run())
    await asyncio.wait_for(running.ready.wait(), timeout=30)
    yield running
    running.stop()
    await asyncio.wait_for(task, timeout=60)


async def test_a_running_worker_is_alive(settings: QueueSettings, worker: Worker) -> None:
    verdict = await check(settings, "dining", WORKER_ID, max_age=15)
    assert verdict.alive, verdict.reason
    assert verdict.reason.startswith("heartbeat ")


async def test_a_stale_or_missing_heartbeat_is_not(
    server: RedisServer, settings: QueueSettings
) -> None:
    missing = await check(settings, "dining", WORKER_ID, max_age=15)
    assert not missing.alive
    assert missing.reason.startswith("no heartbeat for worker 'dining-worker-0'")
    admin = redis.Redis(port=server.port)
    try:
        seconds, _ = sync_reply(admin.time())
        admin.zadd(QueueKeys("dining").workers, {WORKER_ID: (seconds - 60) * 1000})
    finally:
        admin.close()
    stale = await check(settings, "dining", WORKER_ID, max_age=15)
    assert not stale.alive
    assert stale.reason.startswith("heartbeat 6") and "(max 15" in stale.reason


async def test_redis_down_or_full_cannot_tell_so_no_restart(
    server: RedisServer, settings: QueueSettings
) -> None:
    admin = redis.Redis(port=server.port)
    try:
        used = int(sync_reply(admin.info("memory"))["used_memory"])
        admin.config_set("maxmemory", str(used // 2))  # full: the heartbeat is refused
        full = await check(settings, "dining", WORKER_ID, max_age=15)
        admin.config_set("maxmemory", "0")
    finally:
        admin.close()
    assert full.alive and "maxmemory" in full.reason
    server.kill()
    down = await check(settings, "dining", WORKER_ID, max_age=15)
    assert down.alive and down.reason.startswith("cannot tell, Redis: ConnectionError")


def test_the_command_line_exit_statuses(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://worker:{PASSWORD}@127.0.0.1:{server.port}/0")
    assert main(["--agent-type", "dining", "--worker-id", WORKER_ID]) == 1
    assert capsys.readouterr().out.startswith("stale: no heartbeat")
    assert main(["--agent-type", "Not A Type", "--worker-id", WORKER_ID]) == 2
    assert "--agent-type" in capsys.readouterr().err
    assert main(["--agent-type", "dining", "--worker-id", WORKER_ID, "--max-age", "0"]) == 2
