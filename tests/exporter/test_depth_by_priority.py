"""queue_depth_by_priority: the depth of each priority level, read by the exporter under
its own read-only ACL user (LLEN of the levels' lists), beside queue_depth, which stays
the total; an expired high job leaves its level's count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from platform_common.jobs import acl
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.exporter_data import parse
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import fast_settings
from tests.support.redis_server import RedisServer
from tests.support.stored_jobs import make_packed_due

ADMIN_PASSWORD = "admin-pw-71c4"
EXPORTER_PASSWORD = "exporter-pw-2b9e"


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[RedisServer]:
    exporter = " ".join(["exporter", "on", f">{EXPORTER_PASSWORD}", *acl.rules("exporter")])
    server = RedisServer(acl_users=[f"default on >{ADMIN_PASSWORD} ~* &* +@all", exporter]).start()
    try:
        yield server
    finally:
        server.cleanup()


async def test_the_depth_of_each_level_beside_the_total(acl_redis: RedisServer) -> None:
    settings = fast_settings(acl_redis.url_for("default", ADMIN_PASSWORD))
    exporter = Exporter(
        ExporterSettings.from_args(
            ["--redis-url", acl_redis.url_for("exporter", EXPORTER_PASSWORD),
             "--agent-types", "dining"]
        )
    )  # fmt: skip

    async def depths() -> dict[str, float]:
        result = await exporter.scrape()
        assert result.snapshot is not None and result.snapshot.malformed == 0
        samples = parse(exporter.render(result, None)[0].decode())
        shown = {
            dict(labels)["priority"]: value
            for (name, labels), value in samples.items()
            if name == "queue_depth_by_priority"
        }
        shown["total"] = samples[("queue_depth", (("agent_type", "dining"),))]
        return shown

    queue = await JobQueue.connect(settings)
    try:
        assert await depths() == {"high": 0, "normal": 0, "low": 0, "total": 0}
        ids = await queue.enqueue_many(
            [make_job() for _ in range(6)], priority=["high", "high", "low", None, None, None]
        )
        assert await depths() == {"high": 2, "normal": 3, "low": 1, "total": 6}
        await make_packed_due(queue.connection.client, QueueKeys("dining"), [ids[0]])
        assert await queue.cleanup("dining") == [ids[0]]
        assert await depths() == {"high": 1, "normal": 3, "low": 1, "total": 5}
    finally:
        await queue.aclose()
        await exporter.aclose()
