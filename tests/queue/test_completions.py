"""Completion events reach a subscriber, including jobs that finished while its
connection was down (subscribe first, re-read after every reconnect)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

import pytest
import redis.asyncio as aioredis

from platform_common.jobs.queue import Completions, JobPayload, JobQueue
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[JobQueue]:
    job_queue = await JobQueue.connect(fast_settings(redis_url))
    try:
        yield job_queue
    finally:
        await job_queue.aclose()


async def echo(job: JobPayload) -> str:
    return job.task


async def collect(events: Completions, count: int) -> set[str]:
    seen: set[str] = set()
    while len(seen) < count:
        completion = await asyncio.wait_for(anext(events), 20)
        assert completion.result is not None and completion.result.ok
        seen.add(completion.job_id)
    return seen


async def test_jobs_finished_before_subscribing_are_found_by_the_first_read(
    queue: JobQueue,
) -> None:
    jobs = [make_job(task=f"early {i}") for i in range(3)]
    await queue.enqueue_many(jobs)
    async with running_worker(queue.settings, echo):
        for job in jobs:
            await eventually(partial(queue.get_result, job["job_id"]))
    async with queue.completions(watch=[("dining", j["job_id"]) for j in jobs]) as events:
        assert await collect(events, 3) == {j["job_id"] for j in jobs}
        assert events.pending == frozenset()


@pytest.mark.single_node(
    "kills the subscriber's connection on the one server (CLIENT KILL) and asks it PUBSUB "
    "NUMPAT; a cluster's completions across a failover: end_to_end/test_cluster_failover.py"
)
async def test_completions_across_a_killed_subscriber_connection(
    queue: JobQueue, redis_server: RedisServer, redis_client: aioredis.Redis
) -> None:
    before = [make_job(task=f"before {i}") for i in range(2)]
    during = [make_job(task=f"during {i}") for i in range(3)]
    events = queue.completions()
    for job in before + during:
        events.watch("dining", job["job_id"])
    async with running_worker(queue.settings, echo), events:
        await queue.enqueue_many(before)
        assert await collect(events, 2) == {j["job_id"] for j in before}
        # Drop the subscriber's connection, then finish jobs while nobody listens
        # (the iterator is not awaited, so nothing can reconnect in between).
        killed = redis_server.cli("CLIENT", "KILL", "TYPE", "pubsub")
        assert killed == "1"
        await queue.enqueue_many(during)
        for job in during:
            await eventually(partial(queue.get_result, job["job_id"]))
        assert await redis_client.pubsub_numpat() == 0  # really nobody subscribed
        resyncs = events.resyncs
        assert await collect(events, 3) == {j["job_id"] for j in during}
        assert events.resyncs > resyncs  # found by the re-read after reconnecting


@pytest.mark.single_node(
    "waits for the subscription with PUBSUB NUMPAT, which a cluster client lacks"
)
async def test_every_job_mode_yields_unwatched_events(queue: JobQueue) -> None:
    job = make_job()
    async with queue.completions(every_job=True) as events:
        await events.resync()  # subscribe before the job can finish
        first = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0)  # let the iterator subscribe
        client = queue.connection.client
        assert isinstance(client, aioredis.Redis)  # single node: PUBSUB NUMPAT answers

        async def subscribed() -> bool:
            patterns: int = await client.pubsub_numpat()
            return patterns > 0

        await eventually(subscribed, within=10)
        await queue.enqueue(job)
        async with running_worker(queue.settings, echo):
            completion = await asyncio.wait_for(first, 20)
    assert completion.job_id == job["job_id"] and completion.agent_type == "dining"
