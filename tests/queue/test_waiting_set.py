"""The waiting set mirrors the queue list: a job is in it exactly while it waits, with
the time it arrived, so the exporter reads the oldest waiting age without a job hash."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

DINING = QueueKeys("dining")


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[JobQueue]:
    job_queue = await JobQueue.connect(fast_settings(redis_url, max_attempts=2))
    try:
        yield job_queue
    finally:
        await job_queue.aclose()


async def waiting(client: RedisClient) -> dict[str, float]:
    return dict(await client.zrange(DINING.waiting, 0, -1, withscores=True))


async def test_enqueued_jobs_wait_with_their_arrival_and_leave_when_taken(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    seconds, _ = await redis_client.time()
    ids = await queue.enqueue_many([make_job() for _ in range(3)])
    arrivals = await waiting(redis_client)
    assert sorted(arrivals) == sorted(ids)
    assert all(abs(score / 1000 - int(seconds)) < 60 for score in arrivals.values())
    assert await redis_client.llen(DINING.queue) == 3

    async def noop(job: JobPayload) -> str:
        return "ok"

    async with running_worker(queue.settings, noop):
        await eventually(lambda: _all_done(queue, ids))
    assert await waiting(redis_client) == {}


async def test_a_retry_waits_again_once_due(queue: JobQueue, redis_client: RedisClient) -> None:
    job_id = await queue.enqueue(make_job())

    async def fails_once(job: JobPayload) -> str:
        if current_job().attempt == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    async with running_worker(queue.settings, fails_once):
        await eventually(lambda: _all_done(queue, [job_id]))
    assert await waiting(redis_client) == {}
    stats = await queue.stats("dining")
    assert stats.counters["retried"] == 1 and stats.counters["completed"] == 1


async def _all_done(queue: JobQueue, ids: list[str]) -> bool:
    results = [await queue.get_result(job_id, "dining") for job_id in ids]
    return all(result is not None for result in results)
