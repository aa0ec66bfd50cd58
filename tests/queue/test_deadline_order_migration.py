"""Upgrading over a live queue to deadline order: jobs written by the previous version's
enqueue script (tests/support/legacy/queue_enqueue_v2.lua: every packed job has an expiry
bucket entry and a five-field header, no deadline mark) are run once, expired by their
bucket, and never stop the tail scan that expires this version's ordered jobs (their
header lacks ",o": the scan keeps them and walks on). No upgrade step is needed."""

from __future__ import annotations

from typing import Any

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.queue.envelope import unpack_queued
from platform_common.jobs.redis.url import RedisClient
from tests.support.previous_layout import due_in, previous_enqueue
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, fast_settings, running_worker

DINING = QueueKeys("dining")


async def _header_of(client: RedisClient, job_id: str) -> Any:
    packed = await client.hget(DINING.queued, job_id)
    assert packed is not None, f"{job_id} is not packed in the queued hash"
    return unpack_queued(packed.decode() if isinstance(packed, bytes) else str(packed))


async def test_previous_jobs_keep_their_buckets_and_new_ones_are_in_order(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    previous = make_job()
    await previous_enqueue(redis_client, DINING, previous)
    new = make_job()
    await queue.enqueue(new)
    old_job = await _header_of(redis_client, previous["job_id"])
    new_job = await _header_of(redis_client, new["job_id"])
    assert not old_job.ordered and new_job.ordered
    bucket = DINING.expiring_bucket(old_job.expires_at_ms)
    assert await redis_client.lrange(bucket, 0, -1) == [previous["job_id"]]
    assert await redis_client.get(DINING.deadline_mark) is not None


async def test_previous_and_new_jobs_run_once_each(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    previous = [make_job() for _ in range(4)]
    for job in previous[:2]:
        await previous_enqueue(redis_client, DINING, job)
    new = await queue.enqueue_many([make_job() for _ in range(4)])
    for job in previous[2:]:  # behind new ones in the list
        await previous_enqueue(redis_client, DINING, job)
    expected = sorted([*(job["job_id"] for job in previous), *new])

    recorder = RanJobs()
    async with running_worker(fast_settings(redis_url), recorder):

        async def all_done() -> bool:
            return (await queue.stats("dining")).counters["completed"] == 8

        await eventually(all_done)
    assert sorted(recorder.ran) == expected
    stats = await queue.stats("dining")
    assert stats.queued == 0 and stats.counters["expired"] == 0
    assert not await redis_client.exists(DINING.queued, DINING.arrived)


async def test_a_due_new_job_behind_a_waiting_previous_job_is_expired(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    # The previous job waits (an hour left) at the list's tail, unordered: the tail scan
    # keeps it and walks on to the new ordered job behind it, past its deadline.
    waiting = make_job(ttl_seconds=3600)
    await previous_enqueue(redis_client, DINING, waiting)
    due = due_in(0.3)
    await queue.enqueue(due)
    assert (await _header_of(redis_client, due["job_id"])).ordered

    expired = await eventually(lambda: queue.cleanup("dining"))
    assert expired == [due["job_id"]]
    result = await queue.get_result(due["job_id"], "dining")
    assert result is not None and result.status == "expired"
    assert await redis_client.hexists(DINING.queued, waiting["job_id"])
    # The expired entry stays head-ward of the kept one: only the tail's run is trimmed.
    assert await redis_client.lrange(DINING.queue, 0, -1) == [due["job_id"], waiting["job_id"]]
    assert await queue.cleanup("dining") == []  # counted once only


async def test_a_due_previous_job_is_expired_with_the_new_ones_before_it(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    previous = due_in(-60)  # past its deadline a minute ago: its bucket is wholly past
    await previous_enqueue(redis_client, DINING, previous)
    new = due_in(0.3)  # ordered, behind it on the list
    await queue.enqueue(new)
    expired = await queue.cleanup("dining")
    assert expired == [previous["job_id"]]  # the new one is not due yet: the scan stops

    async def the_rest() -> list[str]:
        return await queue.cleanup("dining")

    assert await eventually(the_rest) == [new["job_id"]]
    stats = await queue.stats("dining")
    assert stats.queued == 0 and stats.counters["expired"] == 2
    assert await redis_client.llen(DINING.queue) == 0
    for job in (previous, new):
        result = await queue.get_result(job["job_id"], "dining")
        assert result is not None and result.status == "expired"
