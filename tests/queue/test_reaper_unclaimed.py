"""A job taken off the queue (BLMOVE into processing) by a worker that died before its
claim is given back by the reaper, unchanged and uncounted, whether it was still packed
in the queued hash (a first attempt) or had its job hash (a retry, a requeue, or a job of
the previous layout); then it runs exactly once."""

from __future__ import annotations

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import Chores
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(lease_seconds=0.5)


class Recorder:
    def __init__(self) -> None:
        self.ran: list[tuple[str, int]] = []

    async def __call__(self, job: JobPayload) -> str:
        context = current_job()
        self.ran.append((context.job_id, context.attempt))
        return "ok"


async def test_a_packed_job_taken_by_a_worker_that_died_goes_back_and_runs_once(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    job_ids = await queue.enqueue_many([make_job() for _ in range(3)])
    for _ in job_ids:  # a worker takes them all, then dies before claiming
        await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    chores = Chores(queue.connection, "dining")
    assert (await chores.reap()).requeued == 0  # provisional leases, not yet expired

    async def given_back() -> int:
        return (await chores.reap()).requeued

    assert await eventually(given_back) == 3
    assert await redis_client.llen(DINING.processing) == 0
    assert sorted(await redis_client.lrange(DINING.queue, 0, -1)) == sorted(job_ids)
    stats = await queue.stats("dining")
    assert stats.queued == 3 and stats.counters["started"] == 0  # not an attempt

    recorder = Recorder()
    async with running_worker(fast_settings(redis_url, lease_seconds=0.5), recorder):

        async def done() -> bool:
            return (await queue.stats("dining")).counters["completed"] == 3

        await eventually(done)
    assert sorted(recorder.ran) == sorted((job_id, 1) for job_id in job_ids)
    assert (await queue.stats("dining")).counters["started"] == 3
