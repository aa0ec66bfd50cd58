"""Upgrading over a live queue: jobs written by the previous key layout (a job hash and
`waiting`/`expiry` sorted-set entries per waiting job, written by the enqueue script of
that version, kept in tests/queue/legacy/) are counted, shown, expired and run by this
version exactly once, beside jobs of the new packed layout. No upgrade step is needed:
the previous layout's waiting job is what this version calls a job waiting with its job
hash (like a promoted retry), a path every script still serves."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
LEGACY_ENQUEUE = (Path(__file__).parent / "legacy" / "queue_enqueue_v1.lua").read_text()


async def legacy_enqueue(client: RedisClient, job: dict[str, Any]) -> None:
    """Enqueue `job` as the previous version did (its script, its keys and arguments)."""
    created_ms = int(datetime.fromisoformat(job["created_at"]).timestamp() * 1000)
    job_id = job["job_id"]
    keys = [DINING.queue, DINING.stats, DINING.expiry, DINING.waiting]
    keys += [DINING.job(job_id), DINING.result(job_id)]
    args: list[Any] = [f"legacy:{job_id}", 1, created_ms, 300_000]
    args += [job_id, json.dumps(job), job["ttl_seconds"], created_ms, 3, ""]
    reply = await client.eval(LEGACY_ENQUEUE, len(keys), *keys, *args)
    assert reply == ["ok", 1]


async def test_jobs_of_the_previous_layout_run_once_beside_new_ones(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    old = [make_job() for _ in range(5)]
    for job in old:
        await legacy_enqueue(redis_client, job)
    new = await queue.enqueue_many([make_job() for _ in range(5)])
    await legacy_enqueue(redis_client, late := make_job())  # behind new ones in the list
    old_ids = [job["job_id"] for job in [*old, late]]

    stats = await queue.stats("dining")
    assert stats.queued == 11 and stats.counters["enqueued"] == 11
    record = await queue.get_record("dining", old_ids[0])
    assert record is not None and record.payload is not None
    assert record.payload["job_id"] == old_ids[0]

    recorder = RanJobs()
    async with running_worker(fast_settings(redis_url), recorder):

        async def all_done() -> bool:
            return (await queue.stats("dining")).counters["completed"] == 11

        await eventually(all_done)
    assert sorted(recorder.ran) == sorted([*old_ids, *new])
    stats = await queue.stats("dining")
    assert stats.queued == 0 and stats.in_progress == 0
    for job_id in [*old_ids, *new]:
        result = await queue.get_result(job_id, "dining")
        assert result is not None and result.status == "succeeded"
    assert not await redis_client.exists(DINING.waiting, DINING.queued, DINING.arrived)


async def test_a_waiting_job_of_the_previous_layout_expires_by_the_cleanup(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    created = datetime.now(UTC) - timedelta(seconds=120)
    job = make_job(created_at=created.isoformat(), ttl_seconds=60)  # due a minute ago
    await legacy_enqueue(redis_client, job)
    assert await queue.cleanup("dining") == [job["job_id"]]
    result = await queue.get_result(job["job_id"], "dining")
    assert result is not None and result.status == "expired"
    stats = await queue.stats("dining")
    assert stats.queued == 0 and stats.counters["expired"] == 1
