"""The bounds of a queued job, checked before anything is written: ttl_seconds at most
MAX_TTL_SECONDS (checked in Python), created_at at most MAX_CLOCK_SKEW_SECONDS ahead of
Redis' clock, and created_at + ttl_seconds not already past by Redis' clock (both
checked by the enqueue script against Redis TIME, whatever the producer's clock says)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from platform_common.jobs import clock
from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.keys import EXPIRY_BUCKET_MS, QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.validation import MAX_CLOCK_SKEW_SECONDS, MAX_TTL_SECONDS
from tests.support.keyspace import Snapshot, snapshot
from tests.support.queue_handlers import make_job
from tests.support.stored_jobs import stored_fields

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(register=("dining",))


async def redis_now(redis_client: RedisClient) -> datetime:
    seconds, micros = await redis_client.time()
    return datetime.fromtimestamp(seconds + micros / 1e6, UTC)


async def test_a_ttl_over_the_maximum_is_refused_before_anything_is_written(
    queue: JobQueue, keyspace: RedisClient, redis_client: RedisClient
) -> None:
    before: Snapshot = await snapshot(keyspace)
    for ttl in (MAX_TTL_SECONDS + 1, 2**63 - 1):
        job = make_job(ttl_seconds=ttl)
        with pytest.raises(InvalidPayload) as info:
            await queue.enqueue(job)
        assert list(info.value.errors) == ["ttl_seconds"]
        assert str(MAX_TTL_SECONDS) in info.value.errors["ttl_seconds"]
        with pytest.raises(InvalidPayload) as many:
            await queue.enqueue_many([make_job(), job])
        assert list(many.value.errors) == ["jobs[1].ttl_seconds"]
    assert await snapshot(keyspace) == before


async def test_the_longest_ttl_is_stored_in_integer_digits(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job_id = await queue.enqueue(make_job(ttl_seconds=MAX_TTL_SECONDS))
    # The packed header as the script wrote it (not as a parser would forgive it).
    packed = await redis_client.hget(DINING.queued, job_id)
    enqueued_at, expires_at, ttl, _attempts, _nonce, *order = packed.split("\n", 1)[0].split(",")
    assert order == ["o"]  # the first job is in deadline order: ",o" ends its header
    assert ttl == str(MAX_TTL_SECONDS)
    assert enqueued_at.isdigit() and expires_at.isdigit()
    fields = await stored_fields(redis_client, DINING, job_id)
    assert (fields["ttl"], fields["expires_at"]) == (ttl, expires_at)
    # The deadline mark it raised, its deadline rounded up to a bucket: integer digits too.
    mark = await redis_client.get(DINING.deadline_mark)
    assert mark.isdigit() and 0 < int(mark) - int(expires_at) <= EXPIRY_BUCKET_MS
    assert int(expires_at) > int((await redis_now(redis_client)).timestamp() * 1000)


@pytest.mark.parametrize(
    "ahead",
    [timedelta(seconds=MAX_CLOCK_SKEW_SECONDS + 60), timedelta(days=365 * 970)],
    ids=["skew-plus-a-minute", "year-2996"],
)
async def test_a_created_at_too_far_ahead_of_redis_is_refused_by_the_script(
    queue: JobQueue, keyspace: RedisClient, redis_client: RedisClient, ahead: timedelta
) -> None:
    created = await redis_now(redis_client) + ahead
    job = make_job(created_at=created.isoformat(), ttl_seconds=60)
    before = await snapshot(keyspace)
    with pytest.raises(InvalidPayload) as info:
        await queue.enqueue(job)
    problem = info.value.errors["created_at"]
    assert list(info.value.errors) == ["created_at"]
    assert job["job_id"] in problem and f"at most {MAX_CLOCK_SKEW_SECONDS} s" in problem
    skew = re.search(r"lies (\d+) s ahead of Redis' clock", problem)
    assert skew is not None and abs(int(skew[1]) - ahead.total_seconds()) < 5
    assert await snapshot(keyspace) == before


async def test_enqueue_many_refuses_the_whole_batch_for_one_created_at_too_far_ahead(
    queue: JobQueue, keyspace: RedisClient, redis_client: RedisClient
) -> None:
    created = await redis_now(redis_client) + timedelta(hours=1)
    batch = [make_job() for _ in range(3)]
    batch[1]["created_at"] = created.isoformat()
    before = await snapshot(keyspace)
    with pytest.raises(InvalidPayload) as info:
        await queue.enqueue_many(batch)
    errors = info.value.errors
    assert sorted(errors) == [f"jobs[{i}].created_at" for i in range(3)]
    assert batch[1]["job_id"] in errors["jobs[1].created_at"]
    assert errors["jobs[0].created_at"].startswith("not written")
    assert await snapshot(keyspace) == before


async def test_a_created_at_within_the_skew_is_accepted(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    created = await redis_now(redis_client) + timedelta(seconds=MAX_CLOCK_SKEW_SECONDS // 2)
    job_id = await queue.enqueue(make_job(created_at=created.isoformat(), ttl_seconds=60))
    assert await redis_client.lrange(DINING.queue, 0, -1) == [job_id]


def skew_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The producer's wall clock runs `seconds` off (the package's clock reads time.time)."""
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + seconds)
    assert abs(clock.now() - real_time() - seconds) < 1


async def test_a_producer_clock_behind_redis_cannot_enqueue_a_job_already_past(
    queue: JobQueue,
    keyspace: RedisClient,
    redis_client: RedisClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defect: a producer 120 s behind Redis stamped created_at by its own clock; with a
    60 s TTL the job was accepted though already past by Redis' clock, and expired unrun."""
    skew_clock(monkeypatch, -120.0)
    created = datetime.fromtimestamp(clock.now(), UTC)  # the producer's "now"
    job = make_job(created_at=created.isoformat(), ttl_seconds=60)
    before = await snapshot(keyspace)
    with pytest.raises(InvalidPayload) as info:
        await queue.enqueue(job)
    assert list(info.value.errors) == ["ttl_seconds"]
    problem = info.value.errors["ttl_seconds"]
    assert job["job_id"] in problem and "already in the past" in problem
    past = re.search(r"(\d+) s before Redis' clock", problem)
    assert past is not None and abs(int(past[1]) - 60) < 5
    with pytest.raises(InvalidPayload) as many:
        await queue.enqueue_many([make_job(), job])
    assert many.value.errors["jobs[0].ttl_seconds"].startswith("not written")
    assert "already in the past" in many.value.errors["jobs[1].ttl_seconds"]
    assert await snapshot(keyspace) == before


async def test_a_producer_clock_ahead_of_redis_enqueues_a_job_redis_has_time_for(
    queue: JobQueue, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other way round: 30 s of TTL left by Redis' clock is 90 s past by a producer
    clock 120 s ahead; Redis' clock decides, and the job waits with its 30 s."""
    skew_clock(monkeypatch, 120.0)
    created = await redis_now(redis_client) - timedelta(seconds=30)
    jobs = [make_job(created_at=created.isoformat(), ttl_seconds=60) for _ in range(2)]
    job_id = await queue.enqueue(jobs[0])
    assert await queue.enqueue_many(jobs[1:]) == [jobs[1]["job_id"]]
    assert await redis_client.lrange(DINING.queue, 0, -1) == [jobs[1]["job_id"], job_id]
