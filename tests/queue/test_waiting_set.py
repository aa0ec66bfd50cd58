"""Where a waiting job's arrival is kept, so the exporter reads the oldest waiting age
without reading any job: a job enqueued and not yet claimed is counted in its arrival
second (`arrived` second -> count, `arrivals` the seconds, keys.py); a job that waits
again with a job hash (a retry promoted, a released or requeued job) is in the waiting
set with the time it arrived. Each is there exactly while the job waits."""

from __future__ import annotations

import pytest

from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(max_attempts=2)


async def waiting(client: RedisClient) -> dict[str, float]:
    return dict(await client.zrange(DINING.waiting, 0, -1, withscores=True))


async def arrived(client: RedisClient) -> dict[int, int]:
    """Arrival second (ms) -> jobs of `queued` enqueued in it; checked against `arrivals`,
    which must list exactly those seconds, each scored by itself."""
    counts = {
        int(second): int(count) for second, count in (await client.hgetall(DINING.arrived)).items()
    }
    seconds = await client.zrange(DINING.arrivals, 0, -1, withscores=True)
    assert {int(member): score for member, score in seconds} == {s: s for s in counts}
    return counts


async def test_enqueued_jobs_wait_with_their_arrival_and_leave_when_taken(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    seconds, _ = await redis_client.time()
    ids = await queue.enqueue_many([make_job() for _ in range(3)])
    counts = await arrived(redis_client)
    assert sum(counts.values()) == 3 and all(count > 0 for count in counts.values())
    assert all(second % ARRIVAL_BUCKET_MS == 0 for second in counts)
    assert all(abs(second / 1000 - int(seconds)) < 60 for second in counts)
    assert sorted(await redis_client.hkeys(DINING.queued)) == sorted(ids)
    assert await waiting(redis_client) == {}  # no job hash, so not in the waiting set
    assert await redis_client.llen(DINING.queue) == 3

    async def noop(job: JobPayload) -> str:
        return "ok"

    async with running_worker(queue.settings, noop):
        await eventually(lambda: _all_done(queue, ids))
    assert await arrived(redis_client) == {}
    assert not await redis_client.exists(DINING.arrived, DINING.arrivals, DINING.queued)
    assert await waiting(redis_client) == {}


async def test_a_claim_lowers_its_jobs_arrival_count_and_drops_an_emptied_second(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    ids = await queue.enqueue_many([make_job() for _ in range(3)])
    before = await arrived(redis_client)
    enqueued_at = int((await redis_client.hget(DINING.queued, ids[0])).split(",", 1)[0])
    second = enqueued_at - enqueued_at % ARRIVAL_BUCKET_MS
    assert before[second] >= 1
    leases = AttemptCalls(queue.connection, "dining")
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == ids[0]
    _, claims = await leases.claim("worker-1", [(ids[0], "token-1")])
    assert [claim.job_id for claim in claims] == [ids[0]]
    expected = {**before, second: before[second] - 1}
    assert await arrived(redis_client) == {s: c for s, c in expected.items() if c}
    assert (await queue.stats("dining")).queued == 2


async def test_a_retry_waits_again_once_due(queue: JobQueue, redis_client: RedisClient) -> None:
    job_id = await queue.enqueue(make_job())
    leases = AttemptCalls(queue.connection, "dining")
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    _, (claim,) = await leases.claim("worker-1", [(job_id, "token-1")])
    assert await leases.fail(job_id, "token-1", "first attempt fails") == "retrying"
    await redis_client.zadd(DINING.delayed, {job_id: 0}, xx=True)  # due now
    seconds, _ = await redis_client.time()
    assert await Chores(queue.connection, "dining").promote() == 1
    # Back on the queue with its job hash: in the waiting set, with the time it arrived.
    (arrival,) = (await waiting(redis_client)).values()
    assert abs(arrival / 1000 - int(seconds)) < 60
    assert await arrived(redis_client) == {}
    assert (await queue.stats("dining")).queued == 1

    async def fails_once(job: JobPayload) -> str:
        if current_job().attempt == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    async with running_worker(queue.settings, fails_once):
        await eventually(lambda: _all_done(queue, [job_id]))
    assert await waiting(redis_client) == {}
    stats = await queue.stats("dining")
    assert stats.counters["retried"] == 1 and stats.counters["completed"] == 1
    assert claim.attempt == 1


async def _all_done(queue: JobQueue, ids: list[str]) -> bool:
    results = [await queue.get_result(job_id, "dining") for job_id in ids]
    return all(result is not None for result in results)


async def test_an_arrival_second_left_by_a_corrupt_packed_job_goes_with_the_last_claim(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    # A packed value whose arrival does not parse cannot lower its second's count: once
    # no packed job is left, the claim clears what is left, so no age grows forever.
    job_id = await queue.enqueue(make_job())
    packed = await redis_client.hget(DINING.queued, job_id)
    assert packed is not None
    await redis_client.hset(DINING.queued, job_id, "x" + packed)

    async def noop(job: JobPayload) -> str:
        return "ok"

    async with running_worker(fast_settings(redis_url), noop):
        await eventually(lambda: _all_done(queue, [job_id]))
    result = await queue.get_result(job_id, "dining")
    assert result is not None and result.status == "failed"  # dead-lettered as corrupt
    assert await redis_client.zcard(DINING.arrivals) == 0
    assert await redis_client.hlen(DINING.arrived) == 0
