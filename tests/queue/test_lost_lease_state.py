"""A lease lost because the job's TTL passed and another worker's cleanup expired it is
an expiry, as Redis counted it: the worker that held the job says and counts `expired`,
not `lost` (issue 13). A lease lost to anything else stays `lost`."""

from __future__ import annotations

import asyncio
import logging

import pytest

from platform_common.jobs.errors import LeaseLost
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls
from platform_common.jobs.worker.attempt_calls import LOST_EXPIRED, lost_reason
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker

DINING = QueueKeys("dining")
CONSUMER = "platform_common.jobs.worker"
pytestmark = pytest.mark.queue(max_attempts=2)


async def expire_elsewhere(queue: JobQueue, redis_client: RedisClient, job_id: str) -> None:
    """Another worker's cleanup expires the running job: its TTL is made to have passed
    (the record's deadline, by which the expire script decides), then expire runs."""
    await redis_client.hset(DINING.job(job_id), "expires_at", "1")
    assert await AttemptCalls(queue.connection, "dining").expire([job_id]) == [job_id]


async def test_a_completion_after_the_job_expired_elsewhere_says_it_is_expired(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job = make_job()
    await queue.enqueue(job)
    leases = AttemptCalls(queue.connection, "dining")
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    _, (claim,) = await leases.claim("worker-1", [(job["job_id"], "t-1")])
    await expire_elsewhere(queue, redis_client, job["job_id"])
    assert await leases.lost_state(job["job_id"]) == "expired"
    with pytest.raises(LeaseLost) as complete:
        await leases.complete(claim.job_id, claim.token, "1")
    with pytest.raises(LeaseLost) as fail:
        await leases.fail(claim.job_id, claim.token, "boom")
    assert complete.value.reason == fail.value.reason == LOST_EXPIRED == lost_reason("expired")


async def test_a_job_never_seen_is_missing_and_a_live_one_is_in_its_state(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = AttemptCalls(queue.connection, "dining")
    assert await leases.lost_state("no-such-job") == "missing"
    await redis_client.set(DINING.result("odd"), "not the queue's JSON")
    assert await leases.lost_state("odd") == "missing"
    job = make_job()
    await queue.enqueue(job)
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    await leases.claim("worker-1", [(job["job_id"], "t-1")])
    assert await leases.lost_state(job["job_id"]) == "running"
    assert await leases.lost_state(job["job_id"], "retrying") == "retrying"


async def test_a_worker_whose_running_job_was_expired_elsewhere_logs_and_counts_expired(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The job's TTL passed while this worker's handler ran and another worker's cleanup
    expired it (here the test's): renewal is then refused. The worker cancels the
    handler, as for any lost lease, and reports what Redis recorded: expired."""
    job = make_job()
    await queue.enqueue(job)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def endless(payload: JobPayload) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the lost lease ends it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    caplog.set_level(logging.WARNING, logger=CONSUMER)
    # No cleanup of its own meanwhile: the expiry is another worker's.
    settings = queue.settings.with_overrides(cleanup_interval=60)
    async with running_worker(settings, endless) as worker:
        await asyncio.wait_for(started.wait(), 20)
        await expire_elsewhere(queue, redis_client, job["job_id"])
        await asyncio.wait_for(cancelled.wait(), 20)

        async def reported() -> bool:
            return worker.counts["expired"] == 1

        await eventually(reported)
        assert worker.counts["lost"] == 0
    lines = [r.getMessage() for r in caplog.records if job["job_id"] in r.getMessage()]
    assert lines == [
        f"attempt failed job={job['job_id']} agent_type=dining attempt=1/2 outcome=expired "
        "error=TTL passed: the job did not finish within its ttl_seconds (expired by a "
        "cleanup while it ran)"
    ]
    outcome = await queue.get_result(job["job_id"], "dining")
    assert outcome is not None and outcome.status == "expired"
    counters = (await queue.stats("dining")).counters
    assert (counters["expired"], counters["started"]) == (1, 1)


async def test_a_lease_lost_to_another_attempt_is_still_lost(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The reaper gave the job to another attempt (a new token): lost, naming the state."""
    job = make_job()
    await queue.enqueue(job)
    started = asyncio.Event()

    async def endless(payload: JobPayload) -> None:
        started.set()
        await asyncio.Event().wait()

    caplog.set_level(logging.WARNING, logger=CONSUMER)
    async with running_worker(queue.settings, endless) as worker:
        await asyncio.wait_for(started.wait(), 20)
        await redis_client.hset(DINING.job(job["job_id"]), "token", "someone-else")

        async def reported() -> bool:
            return worker.counts["lost"] == 1

        await eventually(reported)
        assert worker.counts["expired"] == 0
    (line,) = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert line == (
        f"lease lost job={job['job_id']}: renewal refused (job is running); handler cancelled"
    )
