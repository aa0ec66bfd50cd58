"""A job id stays taken while its record or its result is held: a job that ended keeps
its result for its TTL (an expired job keeps only that), and a new job with the same id
must never read it. Enqueue refuses the id until the result is gone; then the id is new,
and its result and completion are the new job's alone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from platform_common.jobs import JobStatus
from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, QueueState
from platform_common.jobs.redis.url import RedisClient
from tests.support.keyspace import snapshot
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker

DINING = QueueKeys("dining")


async def echo(job: JobPayload) -> str:
    return job.task


async def expired_job(queue: JobQueue, *, ttl_seconds: int, left: float = 0.3) -> str:
    """A job whose TTL passes `left` seconds after it is enqueued, expired by the cleanup:
    its record is gone, its "expired" result is held for `ttl_seconds`."""
    created = datetime.now(UTC) - timedelta(seconds=ttl_seconds - left)
    job_id = await queue.enqueue(make_job(created_at=created.isoformat(), ttl_seconds=ttl_seconds))
    assert await eventually(lambda: queue.cleanup("dining")) == [job_id]
    outcome = await queue.get_result(job_id, "dining")
    assert outcome is not None and outcome.status == QueueState.EXPIRED
    return job_id


async def test_the_id_of_an_expired_job_is_taken_while_its_result_is_held(
    queue: JobQueue, keyspace: RedisClient, redis_client: RedisClient
) -> None:
    job_id = await expired_job(queue, ttl_seconds=60)
    assert not await redis_client.exists(DINING.job(job_id))
    before = await snapshot(keyspace)
    with pytest.raises(InvalidPayload) as info:
        await queue.enqueue(make_job(job_id=job_id, task="second life"))
    assert info.value.errors == {"job_id": f"job {job_id!r} already exists"}
    with pytest.raises(InvalidPayload) as many:
        await queue.enqueue_many([make_job(), make_job(job_id=job_id, task="second life")])
    assert many.value.errors == {"jobs[1].job_id": f"job {job_id!r} already exists"}
    assert await snapshot(keyspace) == before
    outcome = await queue.get_result(job_id, "dining")
    assert outcome is not None and outcome.status == QueueState.EXPIRED  # still the old one


async def test_once_the_result_is_gone_the_id_runs_a_new_job_seen_alone(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job_id = await expired_job(queue, ttl_seconds=60)
    await redis_client.delete(DINING.result(job_id))
    events = queue.completions(watch=[("dining", job_id)])
    async with events:
        await queue.enqueue(make_job(job_id=job_id, task="second life"))
        assert await queue.get_result(job_id, "dining") is None
        record = await queue.get_record("dining", job_id)
        assert record is not None and record.status == JobStatus.PENDING
        async with running_worker(queue.settings, echo):
            done = await asyncio.wait_for(anext(events), 20)
    assert done.job_id == job_id and done.result is not None
    assert (done.result.status, done.result.result) == (QueueState.SUCCEEDED, "second life")
    outcome = await queue.get_result(job_id, "dining")
    assert outcome is not None and (outcome.status, outcome.result) == ("succeeded", "second life")


async def test_the_id_is_free_again_once_the_results_short_ttl_passed(queue: JobQueue) -> None:
    job_id = await expired_job(queue, ttl_seconds=1, left=0.2)

    async def result_gone() -> bool:
        return await queue.get_result(job_id, "dining") is None

    await eventually(result_gone, within=10)
    assert await queue.enqueue(make_job(job_id=job_id, ttl_seconds=60)) == job_id
    record = await queue.get_record("dining", job_id)
    assert record is not None and record.status == JobStatus.PENDING
    assert await queue.get_result(job_id, "dining") is None


async def test_a_finished_jobs_id_is_taken_until_its_record_and_result_are_gone(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job_id = await queue.enqueue(make_job(task="first"))
    async with running_worker(queue.settings, echo):
        await eventually(lambda: queue.get_result(job_id, "dining"), within=20)
    with pytest.raises(InvalidPayload):
        await queue.enqueue(make_job(job_id=job_id))  # record and result held
    await redis_client.delete(DINING.job(job_id))  # as if the record's TTL passed first
    with pytest.raises(InvalidPayload):
        await queue.enqueue(make_job(job_id=job_id))  # the result alone holds the id
