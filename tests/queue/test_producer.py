"""Enqueue against a real Redis: what is written, what is refused, and that a refusal
writes nothing; the pre-warmed pool and the health check."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from platform_common.jobs.queue import JobQueue, QueueConnection, QueueSettings
from platform_common.jobs.queue.producer import ENQUEUE_CHUNK
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually
from tests.support.redis_server import find_free_port
from tests.support.stored_jobs import hold_deadline_mark, stored_fields, to_job_hash

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(defaults=True, max_payload_bytes=4096)


async def snapshot(client: RedisClient) -> dict[str, object]:
    """Every key and its value, to prove a refusal changed nothing."""
    state: dict[str, object] = {}
    for key in sorted(await client.keys("*")):
        kind = await client.type(key)
        if kind == "hash":
            state[key] = await client.hgetall(key)
        elif kind == "list":
            state[key] = await client.lrange(key, 0, -1)
        elif kind == "zset":
            state[key] = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            state[key] = sorted(await client.smembers(key))
        else:
            state[key] = await client.get(key)
    return state


def enqueue_call(
    keys: QueueKeys, nonce: str, job_ids: list[str], created_ms: int
) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of one lua/queue_enqueue.lua call (documented at its top) for jobs
    of payload "{}", a 60 s TTL and 3 attempts, created at `created_ms`."""
    script_keys = [keys.queue, keys.stats, keys.queued, keys.expiring]
    script_keys += [keys.arrivals, keys.arrived, keys.deadline_mark]
    args: list[object] = [nonce, len(job_ids), created_ms - 300_000, created_ms + 60_000]
    args += [EXPIRY_BUCKET_MS, ARRIVAL_BUCKET_MS]
    for job_id in job_ids:
        script_keys += [keys.job(job_id), keys.result(job_id)]
        script_keys.append(keys.expiring_bucket(created_ms + 60_000))
        args += [job_id, "{}", 60, created_ms, 3]
    return script_keys, args


async def test_enqueue_writes_job_queue_counter_and_type(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job = make_job()
    assert await queue.enqueue(job) == job["job_id"]
    assert await redis_client.lrange(DINING.queue, 0, -1) == [job["job_id"]]
    # A job waiting unclaimed is one packed field of `queued`, no key of its own.
    assert not await redis_client.exists(DINING.job(job["job_id"]))
    record = await stored_fields(redis_client, DINING, job["job_id"])
    assert json.loads(record["payload"]) == job
    assert record["max_attempts"] == "3" and record["ttl"] == "60"
    waiting = await queue.get_record("dining", job["job_id"])
    assert waiting is not None and waiting.status == "pending" and waiting.payload == job
    enqueued_at, expires_at = int(record["enqueued_at"]), int(record["expires_at"])
    assert enqueued_at > 0
    assert await redis_client.hget(DINING.stats, "enqueued") == "1"
    assert await redis_client.smembers(QueueKeys.types_key()) == {"dining"}
    # The first job is in deadline order: no expiry bucket entry (the cleanup finds it
    # from the list's tail); its arrival second counts it.
    assert await header_of(redis_client, job["job_id"]) == [
        str(enqueued_at),
        str(expires_at),
        "60",
        "3",
        record["nonce"],
        "o",
    ]
    assert not await redis_client.exists(DINING.expiring_bucket(expires_at), DINING.expiring)
    second = enqueued_at - enqueued_at % ARRIVAL_BUCKET_MS
    assert await redis_client.hgetall(DINING.arrived) == {str(second): "1"}
    assert await redis_client.zrange(DINING.arrivals, 0, -1, withscores=True) == [
        (str(second), second)
    ]
    assert not await redis_client.exists(DINING.expiry, DINING.waiting)


async def header_of(client: RedisClient, job_id: str) -> list[str]:
    """The fields of a waiting job's packed header, as the script wrote them."""
    packed: str = await client.hget(DINING.queued, job_id)
    return packed.split("\n", 1)[0].split(",")


async def in_order(client: RedisClient, job_id: str) -> bool:
    """Written in deadline order: ",o" ends its header, and it has no bucket entry."""
    ordered = (await header_of(client, job_id))[5:] == ["o"]
    expires_at = int((await header_of(client, job_id))[1])
    listed = job_id in await client.lrange(DINING.expiring_bucket(expires_at), 0, -1)
    assert ordered != listed, f"{job_id}: ordered {ordered}, in its bucket {listed}"
    return ordered


async def redis_ms(client: RedisClient) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def rounded_up(deadline_ms: int) -> int:
    """The mark a deadline raises: the next bucket boundary above it."""
    return deadline_ms - deadline_ms % EXPIRY_BUCKET_MS + EXPIRY_BUCKET_MS


class Created:
    """Jobs created at one whole second, now, so a test knows each one's deadline."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC).replace(microsecond=0)
        self.ms = int(self.at.timestamp()) * 1000

    def job(self, ttl_seconds: int) -> dict[str, Any]:
        return make_job(created_at=self.at.isoformat(), ttl_seconds=ttl_seconds)

    def deadline(self, ttl_seconds: int) -> int:
        return self.ms + ttl_seconds * 1000


async def test_a_lone_job_sets_the_deadline_mark_to_its_deadline_rounded_up(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    created = Created()
    before = await redis_ms(redis_client)
    job_id = await queue.enqueue(created.job(60))
    assert await in_order(redis_client, job_id)
    mark = await redis_client.get(DINING.deadline_mark)
    assert mark == str(rounded_up(created.deadline(60)))
    # It expires a bucket width after the mark: every job in order under it is due then.
    left = await redis_client.pttl(DINING.deadline_mark)
    after = await redis_ms(redis_client)
    assert int(mark) + EXPIRY_BUCKET_MS - after <= left <= int(mark) + EXPIRY_BUCKET_MS - before


async def test_a_shorter_ttl_after_a_longer_one_is_out_of_order(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """It will be due before the job ahead of it on the list: the tail walk could not
    reach it, so it gets its expiry bucket entry, and the mark stays."""
    created = Created()
    long_id = await queue.enqueue(created.job(600))
    mark = await redis_client.get(DINING.deadline_mark)
    short_id = await queue.enqueue(created.job(60))
    assert await in_order(redis_client, long_id)
    assert not await in_order(redis_client, short_id)
    assert len(await header_of(redis_client, short_id)) == 5
    bucket = DINING.expiring_bucket(created.deadline(60))
    assert await redis_client.lrange(bucket, 0, -1) == [short_id]
    start = int(bucket.rsplit(":", 1)[1])
    assert await redis_client.zrange(DINING.expiring, 0, -1, withscores=True) == [
        (str(start), start)
    ]
    assert await redis_client.get(DINING.deadline_mark) == mark


async def test_an_equal_or_later_deadline_is_in_order_and_raises_the_mark(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    created = Created()
    first = await queue.enqueue(created.job(60))
    equal = await queue.enqueue(created.job(60))
    assert await redis_client.get(DINING.deadline_mark) == str(rounded_up(created.deadline(60)))
    later = await queue.enqueue(created.job(120))
    assert [await in_order(redis_client, job_id) for job_id in (first, equal, later)] == [
        True, True, True,
    ]  # fmt: skip
    assert await redis_client.get(DINING.deadline_mark) == str(rounded_up(created.deadline(120)))
    assert not await redis_client.exists(DINING.expiring)


async def test_a_deadline_up_to_a_bucket_width_under_the_mark_is_in_order(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """The ordered jobs wait in deadline order within a bucket width: a deadline at the
    mark minus the width is in order (and leaves the mark), a second earlier is not."""
    created = Created()
    mark = await hold_deadline_mark(redis_client, DINING, ahead_ms=150_000)
    edge = (mark - EXPIRY_BUCKET_MS - created.ms) // 1000
    assert created.deadline(edge) == mark - EXPIRY_BUCKET_MS
    at_edge = await queue.enqueue(created.job(edge))
    under = await queue.enqueue(created.job(edge - 1))
    assert await in_order(redis_client, at_edge)
    assert not await in_order(redis_client, under)
    assert await redis_client.get(DINING.deadline_mark) == str(mark)


async def test_enqueue_many_decides_the_order_in_push_order(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """Each job of a batch is judged against the jobs pushed before it, in the same
    call: the first job of the batch is the one nearest the tail."""
    created = Created()
    ids = await queue.enqueue_many([created.job(600), created.job(60), created.job(1200)])
    assert [await in_order(redis_client, job_id) for job_id in ids] == [True, False, True]
    assert await redis_client.get(DINING.deadline_mark) == str(rounded_up(created.deadline(1200)))
    await redis_client.delete(DINING.deadline_mark)
    # The other way round, each deadline is no earlier than those ahead of it.
    ids = await queue.enqueue_many([created.job(60), created.job(600), created.job(1200)])
    assert [await in_order(redis_client, job_id) for job_id in ids] == [True, True, True]


async def test_once_the_mark_expired_the_next_job_is_in_order(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    created = Created()
    await queue.enqueue(created.job(600))
    # As time would: the mark outlives its deadline by a bucket width, then goes.
    await redis_client.pexpire(DINING.deadline_mark, 1)

    async def mark_gone() -> bool:
        return not await redis_client.exists(DINING.deadline_mark)

    await eventually(mark_gone)
    short_id = await queue.enqueue(created.job(60))
    assert await in_order(redis_client, short_id)
    assert await redis_client.get(DINING.deadline_mark) == str(rounded_up(created.deadline(60)))


async def test_invalid_oversized_and_duplicate_jobs_write_nothing(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    first = make_job()
    await queue.enqueue(first)
    before = await snapshot(redis_client)
    refusals = [
        (make_job(agent_type="plumbing", ttl_seconds=0), {"agent_type", "ttl_seconds"}),
        (make_job(task="x" * 5000), {"payload"}),
        (make_job(job_id=first["job_id"], task="another"), {"job_id"}),
    ]
    for job, fields in refusals:
        with pytest.raises(InvalidPayload) as caught:
            await queue.enqueue(job)
        assert set(caught.value.errors) == fields
        assert await snapshot(redis_client) == before


async def test_enqueue_many_is_all_or_nothing(queue: JobQueue, redis_client: RedisClient) -> None:
    existing = make_job()
    await queue.enqueue(existing)
    before = await snapshot(redis_client)
    good = [make_job() for _ in range(3)]
    batches = [
        ([*good, make_job(ttl_seconds=-1)], {"jobs[3].ttl_seconds"}),
        ([*good, dict(good[0])], {"jobs[3].job_id"}),
        ([*good, existing], {"jobs[3].job_id"}),
    ]
    for batch, fields in batches:
        with pytest.raises(InvalidPayload) as caught:
            await queue.enqueue_many(batch)
        assert set(caught.value.errors) == fields
        assert await snapshot(redis_client) == before


async def test_a_batch_of_many_bad_jobs_names_ten_and_keeps_every_problem(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    before = await snapshot(redis_client)
    with pytest.raises(InvalidPayload) as caught:
        await queue.enqueue_many([make_job(ttl_seconds=-1) for _ in range(2_000)])
    assert len(caught.value.errors) == 2_000  # every problem, for a caller to act on
    message = str(caught.value)
    assert len(message) < 2_000  # not one line per job: a log line stays readable
    assert message.count("ttl_seconds") == 2 * InvalidPayload.SHOWN  # field list + summary
    assert "and 1990 more" in message
    assert await snapshot(redis_client) == before


async def test_enqueue_many_across_chunks_and_types_keeps_order(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    jobs = [make_job() for _ in range(ENQUEUE_CHUNK + 7)] + [make_job("flights")]
    ids = await queue.enqueue_many(jobs)
    assert ids == [job["job_id"] for job in jobs]
    # LPUSH in order: the first job sits at the consuming (right) end.
    assert await redis_client.lrange(DINING.queue, 0, -1) == ids[:-1][::-1]
    assert await redis_client.lrange(QueueKeys("flights").queue, 0, -1) == [ids[-1]]
    assert await redis_client.hget(DINING.stats, "enqueued") == str(ENQUEUE_CHUNK + 7)
    assert (await queue.stats("flights")).counters["enqueued"] == 1


@pytest.mark.single_node(
    "counts CLIENT LIST of one server; a cluster client warms connections per node"
)
async def test_pool_is_prewarmed_and_ping_answers(
    redis_url: str, redis_client: RedisClient
) -> None:
    settings = QueueSettings.from_url(redis_url, pool_min=5, pool_max=20)
    before = len(await redis_client.client_list())
    job_queue = await JobQueue.connect(settings)
    try:
        assert len(await redis_client.client_list()) - before >= 5
        assert await job_queue.ping() is True
    finally:
        await job_queue.aclose()


async def test_ping_reports_false_when_redis_is_unreachable() -> None:
    settings = QueueSettings.from_url(f"redis://127.0.0.1:{find_free_port()}/0", pool_min=0)
    job_queue = JobQueue(QueueConnection(settings))
    try:
        assert await job_queue.ping() is False
    finally:
        await job_queue.aclose()


async def test_enqueue_survives_a_script_flush(queue: JobQueue, redis_client: RedisClient) -> None:
    await queue.enqueue(make_job())
    await redis_client.script_flush()
    job = make_job()
    await queue.enqueue(job)  # NOSCRIPT on the hot path: reloaded, run once
    assert await redis_client.lrange(DINING.queue, 0, 0) == [job["job_id"]]
    assert (await queue.stats("dining")).counters["enqueued"] == 2


async def test_enqueue_many_survives_a_script_flush(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    await queue.enqueue(make_job())
    await redis_client.script_flush()
    jobs = [make_job() for _ in range(ENQUEUE_CHUNK * 2 + 7)]
    await queue.enqueue_many(jobs)  # every chunk answers NOSCRIPT, then runs once
    assert await redis_client.llen(DINING.queue) == len(jobs) + 1
    assert (await queue.stats("dining")).counters["enqueued"] == len(jobs) + 1


async def test_a_streamed_batch_cancelled_after_its_first_call_is_written_whole(
    redis_url: str, redis_client: RedisClient
) -> None:
    """Cancelling enqueue_many once a chunk is out must not leave the batch cut."""
    connection = await QueueConnection.open(QueueSettings.from_url(redis_url))
    keys = connection.keys("dining")
    caller: asyncio.Task[list[object]] | None = None

    def calls() -> Iterator[tuple[list[str], list[object]]]:
        for chunk in range(3):
            job_id = f"streamed-{chunk}"
            if chunk == 1:
                assert caller is not None
                caller.cancel()  # the caller goes away after the first call went out
            yield enqueue_call(keys, f"nonce-{chunk}", [job_id], int(time.time() * 1000))

    try:
        caller = asyncio.ensure_future(
            connection.run_script_many(connection.scripts.enqueue, calls())
        )
        with pytest.raises(asyncio.CancelledError):
            await caller

        async def all_three_written() -> bool:
            written: int = await redis_client.llen(keys.queue)
            return written >= 3

        await eventually(all_three_written)
        assert await redis_client.lrange(keys.queue, 0, -1) == [
            "streamed-2",
            "streamed-1",
            "streamed-0",
        ]
    finally:
        await connection.aclose()


async def test_a_replayed_enqueue_call_is_recognised_by_its_nonce(
    redis_url: str, redis_client: RedisClient
) -> None:
    """The lane re-sends a call whose reply was lost: the script must see its own
    writes (same nonce) as done, and another caller's (other nonce) as duplicates."""
    connection = await QueueConnection.open(QueueSettings.from_url(redis_url))
    keys = connection.keys("dining")
    created = int(time.time() * 1000)

    def call(nonce: str, *job_ids: str) -> tuple[list[str], list[object]]:
        return enqueue_call(keys, nonce, list(job_ids), created)

    try:
        script = connection.scripts.enqueue
        assert await connection.run_script(script, *call("first", "a", "b")) == ["ok", 2]
        # The nonce lives in the packed value, which is all a waiting job has; in
        # deadline order, ",o" follows it, and the replay still reads it.
        assert (await stored_fields(redis_client, keys, "a"))["nonce"] == "first"
        assert (await header_of(redis_client, "a"))[4:] == ["first", "o"]
        assert await connection.run_script(script, *call("first", "a", "b")) == ["ok", 0]
        assert await connection.run_script(script, *call("first", "a", "c")) == ["ok", 1]
        assert await connection.run_script(script, *call("other", "c", "d")) == [
            "duplicate",
            "c",
        ]
        # Once a job has a job hash (as a claim gives it), its nonce is read there.
        await to_job_hash(redis_client, keys, "b")
        assert await connection.run_script(script, *call("first", "b")) == ["ok", 0]
        assert await connection.run_script(script, *call("other", "b")) == ["duplicate", "b"]
        assert await redis_client.lrange(keys.queue, 0, -1) == ["c", "b", "a"]
        assert await redis_client.hget(keys.stats, "enqueued") == "3"
        assert sorted(await redis_client.hkeys(keys.queued)) == ["a", "c"]
    finally:
        await connection.aclose()


async def test_a_replay_after_the_deadline_passed_is_answered_as_written(
    redis_url: str, redis_client: RedisClient
) -> None:
    """A call whose reply was lost is re-sent; if its jobs' deadline passed meanwhile, the
    replay must still say "ok" (they were written in time), while a new call past its
    deadline is refused and writes nothing."""
    connection = await QueueConnection.open(QueueSettings.from_url(redis_url))
    keys = connection.keys("dining")
    created = int(time.time() * 1000)

    def past_deadline(nonce: str, job_id: str) -> tuple[list[str], list[object]]:
        script_keys, args = enqueue_call(keys, nonce, [job_id], created)
        args[3] = created - 60_000  # the batch's earliest deadline, as if a minute ago
        return script_keys, args

    try:
        script = connection.scripts.enqueue
        assert await connection.run_script(
            script, *enqueue_call(keys, "first", ["a"], created)
        ) == [
            "ok",
            1,
        ]
        before = await snapshot(redis_client)
        assert await connection.run_script(script, *past_deadline("first", "a")) == ["ok", 0]
        reply = await connection.run_script(script, *past_deadline("other", "b"))
        assert reply[0] == "expired" and int(reply[1]) >= created
        assert await snapshot(redis_client) == before
    finally:
        await connection.aclose()
