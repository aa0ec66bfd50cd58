"""Lazy removal at expiry: a job expired while it waits leaves its queue list entry (an
LREM would scan the whole backlog inside Redis); the worker that pops the entry drops it,
running and counting nothing. Only the run of such entries at the list's very tail is
removed, by the cleanup's tail walk (lua/queue_expire_tail.lua, test_tail_expiry.py).
Runs on a single node and on the cluster.

A job enqueued and never claimed waits packed in `queued` (keys.py); the cleanup expires
it once its expiry bucket is wholly past, so `make_packed_due` moves its deadline that
far back (tests/support/stored_jobs.py). A retry waits with its job hash; `make_due`
moves its deadline."""

from __future__ import annotations

import asyncio

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import Chores
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, running_worker
from tests.support.stored_jobs import make_packed_due, to_job_hash

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(cleanup_interval=60)


async def make_due(client: RedisClient, job_ids: list[str]) -> None:
    """Move the TTL deadline of jobs that have a job hash (retries) a second into Redis's
    past (record and expiry set alike), so they are due without waiting."""
    seconds, micros = await client.time()
    past = int(seconds) * 1000 + int(micros) // 1000 - 1000
    for job_id in job_ids:
        await client.hset(DINING.job(job_id), "expires_at", str(past))
        await client.zadd(DINING.expiry, {job_id: past})


def balanced(counters: dict[str, int], live: int) -> bool:
    """The invariant of keys.py: every job enqueued ended exactly one way, or still lives."""
    ended = counters["completed"] + counters["failed"] + counters["expired"]
    return counters["enqueued"] == ended + live


async def drained(client: RedisClient) -> bool:
    return not await client.exists(DINING.queue, DINING.processing, DINING.waiting, DINING.queued)


async def test_expired_waiting_jobs_leave_entries_that_a_worker_skips_without_charging(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    # The expired jobs sit behind longer-lived ones: the old LREM scanned past them all.
    longer = await queue.enqueue_many([make_job(ttl_seconds=600) for _ in range(5)])
    due = await queue.enqueue_many([make_job(ttl_seconds=600) for _ in range(3)])
    events = queue.completions(watch=[("dining", job_id) for job_id in due])
    await make_packed_due(redis_client, DINING, due)

    assert sorted(await queue.cleanup("dining")) == sorted(due)
    completions = [await asyncio.wait_for(anext(events), 10) for _ in due]
    await events.aclose()
    assert sorted(c.job_id for c in completions) == sorted(due)
    assert {c.result.status if c.result else None for c in completions} == {"expired"}
    for job_id in due:
        result = await queue.get_result(job_id, "dining")
        assert result is not None and result.status == "expired"
        assert result.error == "not started within its ttl of 600 s"
        assert not await redis_client.exists(DINING.job(job_id))
    assert await redis_client.llen(DINING.queue) == 8  # the entries stay...
    assert sorted(await redis_client.hkeys(DINING.queued)) == sorted(longer)
    assert sum(int(count) for count in await redis_client.hvals(DINING.arrived)) == 5
    assert not await redis_client.exists(DINING.waiting, DINING.expiry)
    stats = await queue.stats("dining")
    assert stats.queued == 5  # ...but the depth counts the jobs that wait
    assert stats.counters["expired"] == 3 and balanced(stats.counters, live=5)

    handler = RanJobs()
    async with running_worker(queue.settings, handler) as worker:
        await eventually(lambda: drained(redis_client))
    assert sorted(handler.ran) == sorted(longer)  # the stale entries ran nothing
    counters = (await queue.stats("dining")).counters
    assert (counters["started"], counters["completed"], counters["expired"]) == (5, 5, 3)
    assert (counters["failed"], counters["retried"]) == (0, 0)
    assert balanced(counters, live=0)
    assert sum(worker.counts.values()) == 5  # nothing counted for a skipped entry
    for job_id in due:  # and nothing written over their outcome
        result = await queue.get_result(job_id, "dining")
        assert result is not None and result.status == "expired"
        assert not await redis_client.exists(DINING.job(job_id))
    assert not await redis_client.exists(DINING.arrived, DINING.arrivals)


async def test_an_expired_retry_leaves_the_delayed_set_or_its_queue_entry(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """A retry is in the delayed set (ZREM there is O(log N)) or, once promoted, on the
    queue list: its entry there stays like a waiting job's, but at the list's tail the
    same cleanup's tail walk (lua/queue_expire_tail.lua) removes it."""
    delayed, promoted = make_job(), make_job()

    async def fails_first(job: JobPayload) -> str:
        if current_job().attempt == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    await queue.enqueue_many([delayed, promoted])
    slow_retry = queue.settings.with_overrides(backoff_base=600.0)  # stays delayed
    async with running_worker(slow_retry, fails_first):
        await eventually(lambda: _in_delayed(redis_client, 2))
    # Promote one by hand: due now, then on the queue list with state "retrying".
    await redis_client.zadd(DINING.delayed, {promoted["job_id"]: 0})
    assert await Chores(queue.connection, "dining").promote() == 1
    assert await redis_client.lrange(DINING.queue, 0, -1) == [promoted["job_id"]]
    assert await redis_client.hget(DINING.job(promoted["job_id"]), "state") == "retrying"

    ids = [delayed["job_id"], promoted["job_id"]]
    await make_due(redis_client, ids)
    assert sorted(await queue.cleanup("dining")) == sorted(ids)
    assert await redis_client.zcard(DINING.delayed) == 0
    assert await redis_client.lrange(DINING.queue, 0, -1) == []  # it was at the tail
    assert await redis_client.zcard(DINING.waiting) == 0

    handler = RanJobs()
    async with running_worker(queue.settings, handler):
        await eventually(lambda: drained(redis_client))
    assert handler.ran == []
    counters = (await queue.stats("dining")).counters
    assert (counters["started"], counters["retried"], counters["expired"]) == (2, 2, 2)
    assert balanced(counters, live=0)
    for job_id in ids:
        result = await queue.get_result(job_id, "dining")
        assert result is not None and result.status == "expired"


async def _in_delayed(client: RedisClient, count: int) -> bool:
    return int(await client.zcard(DINING.delayed)) == count


async def test_a_stale_entry_of_a_reused_id_runs_the_new_job_once(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """Once the old "expired" result is gone, the id may be enqueued again while its stale
    entry still waits. That entry then claims the new job (any claimable record is
    claimed); the new job's own entry finds it running or finished and is dropped. The
    job runs once, and every counter balances. A job waiting with a job hash is kept at
    the list's tail: the cleanup's tail walk trims only the run of stale entries at the
    very tail, so the stale entry, head-ward of it, stays."""
    kept = make_job(ttl_seconds=600, task="the kept job")
    await queue.enqueue(kept)
    await to_job_hash(redis_client, DINING, kept["job_id"])  # in `waiting`: kept
    job = make_job(ttl_seconds=600)
    await queue.enqueue(job)
    await make_packed_due(redis_client, DINING, [job["job_id"]])
    assert await queue.cleanup("dining") == [job["job_id"]]
    await redis_client.delete(DINING.result(job["job_id"]))  # its TTL ran out

    again = make_job(job_id=job["job_id"], task="the new job")
    await queue.enqueue(again)
    listed = await redis_client.lrange(DINING.queue, 0, -1)
    assert listed == [job["job_id"], job["job_id"], kept["job_id"]]
    assert (await queue.stats("dining")).queued == 2

    tasks: list[str] = []

    async def record(payload: JobPayload) -> str:
        tasks.append(payload.task)
        return "done"

    async with running_worker(queue.settings, record):
        await eventually(lambda: drained(redis_client))
    assert tasks == ["the kept job", "the new job"]
    result = await queue.get_result(job["job_id"], "dining")
    assert result is not None and (result.status, result.result) == ("succeeded", "done")
    counters = (await queue.stats("dining")).counters
    assert (counters["enqueued"], counters["started"], counters["completed"]) == (3, 2, 2)
    assert counters["expired"] == 1 and balanced(counters, live=0)


async def test_a_stale_entry_taken_by_a_worker_that_died_is_dropped_by_the_reaper(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """Moved into processing (BLMOVE) by a worker that died before its claim: the reaper
    finds the record gone and drops the entry, counting nothing."""
    job = make_job(ttl_seconds=600)
    await queue.enqueue(job)
    await make_packed_due(redis_client, DINING, [job["job_id"]])
    assert await queue.cleanup("dining") == [job["job_id"]]
    await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    before = (await queue.stats("dining")).counters
    chores = Chores(queue.connection, "dining")

    async def reaped() -> bool:
        await chores.reap()
        return not await redis_client.exists(DINING.processing, DINING.leases)

    await eventually(reaped)  # the first run gives it a provisional lease
    assert not await redis_client.exists(DINING.queue)
    assert (await queue.stats("dining")).counters == before
