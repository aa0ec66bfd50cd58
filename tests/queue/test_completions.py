"""Completion events reach a subscriber, including jobs that finished while its
connection was down (subscribe first, re-read after every reconnect)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from functools import partial

import pytest
import redis.asyncio as aioredis

from platform_common.jobs import BackendUnavailable
from platform_common.jobs.queue import Completions, JobPayload, JobQueue
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer


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


# -- a reused job id ---------------------------------------------------------------------
async def free_the_id(queue: JobQueue, agent_type: str, job_id: str) -> None:
    """Remove a finished job's record and result, as their TTL would, so the id can be
    enqueued again (enqueue refuses an id whose record or result is still held)."""
    keys = queue.connection.keys(agent_type)
    client = queue.connection.client
    for key in (keys.job(job_id), keys.result(job_id)):  # one slot, but one key a call
        await client.delete(key)


async def test_watching_a_delivered_id_again_delivers_its_next_job_once(queue: JobQueue) -> None:
    """Defect: watch() of an id delivered before was ignored, so the completion of a later
    job with that id never came."""
    first = make_job(task="first")
    job_id = first["job_id"]
    marker = make_job(task="marker")
    async with running_worker(queue.settings, echo), queue.completions() as events:
        events.watch("dining", job_id)
        await queue.enqueue(first)
        done = await asyncio.wait_for(anext(events), 20)
        assert (done.job_id, done.result and done.result.result) == (job_id, "first")
        await free_the_id(queue, "dining", job_id)
        await queue.enqueue(make_job(job_id=job_id, task="second"))
        events.watch("dining", job_id)
        assert events.pending == {("dining", job_id)}
        again = await asyncio.wait_for(anext(events), 20)
        assert (again.job_id, again.result and again.result.result) == (job_id, "second")
        # Exactly once: the next completion is another job's, though the re-read and the
        # event both saw this one (and the first job's event may have come late).
        events.watch("dining", marker["job_id"])
        await queue.enqueue(marker)
        after = await asyncio.wait_for(anext(events), 20)
        assert after.job_id == marker["job_id"]


async def publish(queue: JobQueue, job_id: str) -> None:
    """The completion event of `job_id` alone (a late one: no result stored with it)."""
    channel = queue.connection.keys("dining").channel
    await queue.connection.client.execute_command("PUBLISH", channel, job_id)


async def publish_finished(queue: JobQueue, job_id: str, value: str) -> None:
    """Store a succeeded result and publish its event, as queue_complete.lua does."""
    keys = queue.connection.keys("dining")
    envelope = f'{{"status":"succeeded","result":"{value}","error":null}}'
    await queue.connection.client.set(keys.result(job_id), envelope, ex=60)
    await publish(queue, job_id)


@pytest.mark.single_node(
    "orders a late event before a marker's by publishing both on one server; cluster "
    "nodes forward PUBLISH over the bus, in no order a test can rely on"
)
async def test_a_late_event_of_the_earlier_job_is_not_taken_for_the_new_one(
    queue: JobQueue,
) -> None:
    """The race a re-watch opens: the first job's event can arrive after its result was
    removed and the id watched again (it was delivered by the re-read, before its event).
    That event finds no result; it must not be delivered as the new job's outcome."""
    first = make_job(task="first")
    job_id = first["job_id"]
    gate = asyncio.Event()

    async def gated(job: JobPayload) -> str:
        if job.task == "second":
            await gate.wait()
        return job.task

    async with running_worker(queue.settings, gated), queue.completions() as events:
        events.watch("dining", job_id)
        await queue.enqueue(first)
        assert (await asyncio.wait_for(anext(events), 20)).job_id == job_id
        await free_the_id(queue, "dining", job_id)
        events.watch("dining", job_id)  # before the new job exists: no record to judge by
        await publish(queue, job_id)  # the late event
        await queue.enqueue(make_job(job_id=job_id, task="second"))
        await publish(queue, job_id)  # late again, the job running
        marker = make_job()["job_id"]
        events.watch("dining", marker)
        await publish_finished(queue, marker, "m")  # after the late events, on one server
        assert (await asyncio.wait_for(anext(events), 20)).job_id == marker
        gate.set()
        again = await asyncio.wait_for(anext(events), 20)
    assert (again.job_id, again.result and again.result.result) == (job_id, "second")


@pytest.mark.single_node(
    "orders an event before a marker's (see above); waits for the subscription with "
    "PUBSUB NUMPAT, which a cluster client lacks"
)
async def test_an_event_for_a_job_that_is_queued_again_waits_for_its_own(
    queue: JobQueue, redis_client: aioredis.Redis
) -> None:
    """A first watch, no delivery before: an event that finds no result while the job
    is queued is an earlier job's, not this one's outcome (result None)."""
    job = make_job()
    await queue.enqueue(job)  # no worker: it stays queued
    async with queue.completions(watch=[("dining", job["job_id"])]) as events:
        first = asyncio.ensure_future(anext(events))

        async def subscribed_and_read() -> bool:
            # The re-read that follows the subscription has taken its list of watched
            # jobs, so the marker watched below is found by its event alone.
            return await redis_client.pubsub_numpat() > 0 and events.resyncs > 0

        await eventually(subscribed_and_read)
        await publish(queue, job["job_id"])
        marker = make_job()["job_id"]
        events.watch("dining", marker)
        await publish_finished(queue, marker, "m")
        assert (await asyncio.wait_for(first, 20)).job_id == marker
        assert events.pending == {("dining", job["job_id"])}
        async with running_worker(queue.settings, echo):
            done = await asyncio.wait_for(anext(events), 20)
    assert done.job_id == job["job_id"] and done.result is not None and done.result.ok


# -- Redis failures ------------------------------------------------------------------------
@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test alone: it is stopped and restarted under the queue."""
    with RedisServer() as server:
        yield server


async def test_a_stopped_server_ends_iteration_with_backend_unavailable_then_recovers(
    own_server: RedisServer,
) -> None:
    """Defect: Completions raised raw redis-py errors (or waited without end)."""
    async with await JobQueue.connect(fast_settings(own_server.url)) as queue:
        job = make_job()
        events = Completions(
            queue.connection, watch=[("dining", job["job_id"])], outage_timeout=0.5
        )
        async with events:
            await events.resync()
            waiting = asyncio.ensure_future(anext(events))
            await eventually(partial(subscribed, own_server))
            own_server.stop()
            with pytest.raises(
                BackendUnavailable,
                match=f"Redis at {re.escape(own_server.url)} unreachable: ConnectionError",
            ):
                await asyncio.wait_for(waiting, 30)
            with pytest.raises(BackendUnavailable, match="unreachable"):
                await events.resync()
            own_server.start()
            # The iterator survives the error: it reconnects, re-subscribes, re-reads.
            async with running_worker(queue.settings, echo):
                await queue.enqueue(job)
                done = await asyncio.wait_for(anext(events), 30)
    assert done.job_id == job["job_id"] and done.result is not None and done.result.ok


async def subscribed(server: RedisServer) -> bool:
    return server.cli("PUBSUB", "NUMPAT") != "0"


async def test_a_refusing_server_ends_iteration_with_backend_unavailable() -> None:
    """A refusal (here NOPERM on PSUBSCRIBE) was retried without end, silently.
    JobQueue.completions() passes its outage_timeout on (the default, 60 s, would
    outlast the wait below)."""
    user = "watcher on >pw ~* &* +@all -psubscribe"
    with RedisServer(acl_users=[user]) as server:
        settings = fast_settings(server.url_for("watcher", "pw"))
        async with await JobQueue.connect(settings) as queue:
            events = queue.completions(watch=[("dining", "j")], outage_timeout=0.2)
            async with events:
                with pytest.raises(
                    BackendUnavailable, match="refused to serve completions: NoPermissionError"
                ) as info:
                    await asyncio.wait_for(anext(events), 30)
    assert "pw" not in str(info.value)
