"""The per-worker jobs in progress gauge for a real worker: a Worker in this process runs
jobs whose handler blocks, and the exporter, under its own read-only ACL user, shows
the count the worker's heartbeat wrote (never reading a job hash)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from platform_common.jobs import acl
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.exporter_data import parse
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer

ADMIN_PASSWORD = "admin-pw-5e21"
EXPORTER_PASSWORD = "exporter-pw-90d3"
GAUGE = "worker_jobs_in_progress"


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[RedisServer]:
    exporter = " ".join(["exporter", "on", f">{EXPORTER_PASSWORD}", *acl.rules("exporter")])
    server = RedisServer(acl_users=[f"default on >{ADMIN_PASSWORD} ~* &* +@all", exporter]).start()
    try:
        yield server
    finally:
        server.cleanup()


async def test_a_running_worker_shows_its_jobs_in_progress(acl_redis: RedisServer) -> None:
    settings = fast_settings(acl_redis.url_for("default", ADMIN_PASSWORD))
    exporter = Exporter(
        ExporterSettings.from_args(
            ["--redis-url", acl_redis.url_for("exporter", EXPORTER_PASSWORD),
             "--agent-types", "dining"]
        )
    )  # fmt: skip
    release = asyncio.Event()

    async def held(job: JobPayload) -> dict[str, Any]:
        await release.wait()
        return {}

    async def shown(worker_id: str) -> float | None:
        result = await exporter.scrape()
        assert result.snapshot is not None and result.snapshot.malformed == 0
        samples = parse(exporter.render(result, None)[0].decode())
        return samples.get((GAUGE, (("agent_type", "dining"), ("worker", worker_id))))

    async def shows(worker_id: str, expected: float) -> bool:
        return await shown(worker_id) == expected

    queue = await JobQueue.connect(settings)
    try:
        async with running_worker(settings, held, concurrency=5) as worker:
            await eventually(lambda: shows(worker.worker_id, 0))
            await queue.enqueue_many([make_job() for _ in range(3)])
            await eventually(lambda: shows(worker.worker_id, 3))
            release.set()
            await eventually(lambda: shows(worker.worker_id, 0))
        # Gone (a graceful stop removes its heartbeat and count): no series any more.
        assert await shown(worker.worker_id) is None
    finally:
        await queue.aclose()
        await exporter.aclose()
