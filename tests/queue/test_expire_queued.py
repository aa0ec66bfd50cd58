"""Expiry of jobs that wait packed in `queued` (enqueued, never claimed) by their expiry
bucket: the cleanup (Chores.cleanup -> expiry.expire_queued ->
lua/queue_expire_queued.lua) expires the jobs of an expiry bucket once the whole bucket
is past by Redis TIME, and skips the entries of jobs that left `queued` since (claimed,
or expired by a claim). Only a job enqueued out of deadline order has a bucket entry
(lua/queue_enqueue.lua): every test here holds the deadline mark a day ahead first
(stored_jobs.hold_deadline_mark), so its jobs, of a shorter TTL, are all out of order.
The same cleanup then walks the queue list from its tail (lua/queue_expire_tail.lua,
test_tail_expiry.py): it trims the entries of expired jobs off the tail, and expires a
due job it meets there. Each expired
job is counted once, gets its "expired" result for its TTL, and its completion event;
its packed field and its arrival count go. Then the fault injection, as
test_expire_faults.py does it for queue_expire.lua: a key of another type or a value
that does not parse is refused naming the key, with the whole keyspace unchanged.

A deadline is moved into the past by tests/support/stored_jobs.make_packed_due
(validation refuses a job whose deadline has already passed)."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

import pytest

from platform_common.jobs import CorruptQueueState
from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from platform_common.jobs.queue import QueueState
from platform_common.jobs.queue.expiry import (
    CORRUPT_RESULT_TTL_SECONDS,
    ExpireReport,
    expire_in_order,
)
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.support.keyspace import changed_keys
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job
from tests.support.stored_jobs import hold_deadline_mark, make_packed_due

pytestmark = [
    pytest.mark.cluster_sample(planted=("kind", "value")),
    pytest.mark.queue(cleanup_interval=60, register=("dining",)),
]

DINING = QueueKeys("dining")
TTL = 600
IN_ORDER_TTL = 2 * 86_400
"""A TTL past the deadline mark the tests hold (a day ahead): a job in deadline order."""


@dataclass
class Env(QueueEnv):
    async def prepare(self) -> None:
        # The bucket path is what this file tests: the jobs are out of deadline order.
        await hold_deadline_mark(self.raw, DINING)

    async def enqueue(self, count: int) -> list[str]:
        return await self.queue.enqueue_many([make_job(ttl_seconds=TTL) for _ in range(count)])

    async def enqueue_in_order(self) -> str:
        """A job in deadline order, due in days: at the list's tail, the tail walk stops
        at it, so it reaches no job behind it."""
        job_id: str = await self.queue.enqueue(make_job(ttl_seconds=IN_ORDER_TTL))
        assert (await self.raw.hget(DINING.queued, job_id)).split("\n", 1)[0].endswith(",o")
        return job_id

    async def counter(self, name: str) -> int:
        return (await self.queue.stats("dining")).counters[name]

    async def arrived(self) -> int:
        """Jobs counted in `arrived`, every second summed."""
        return sum(int(count) for count in await self.raw.hvals(DINING.arrived))

    async def claim(self, job_id: str, token: str = "token-1") -> list[str]:
        """Take `job_id` off the queue list as a worker does and claim it: the ids of the
        claims that run."""
        assert await self.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
        _, claims = await AttemptCalls(self.queue.connection, "dining").claim(
            "w-1", [(job_id, token)]
        )
        return [claim.job_id for claim in claims]


def bucket_start(bucket_key: str) -> int:
    return int(bucket_key.rsplit(":", 1)[1])


# -- expiry ------------------------------------------------------------------------------
async def test_the_cleanup_expires_a_packed_job_once_its_bucket_is_past(env: Env) -> None:
    due = await env.enqueue(3)
    waits = await env.enqueue(2)  # deadline ahead: untouched
    events = env.queue.completions(watch=[("dining", job_id) for job_id in due])
    deadline = await make_packed_due(env.raw, DINING, due)
    bucket = DINING.expiring_bucket(deadline)
    assert await env.arrived() == 5

    assert sorted(await env.queue.cleanup("dining")) == sorted(due)
    completions = [await asyncio.wait_for(anext(events), 10) for _ in due]
    await events.aclose()
    assert sorted(c.job_id for c in completions) == sorted(due)
    assert {c.result.status if c.result else None for c in completions} == {"expired"}
    for job_id in due:
        result = await env.queue.get_result(job_id, "dining")
        assert result is not None and result.status == QueueState.EXPIRED
        assert result.error == f"not started within its ttl of {TTL} s"
        assert TTL - 60 < await env.raw.ttl(DINING.result(job_id)) <= TTL
        assert await env.raw.hget(DINING.queued, job_id) is None
        assert not await env.raw.exists(DINING.job(job_id))
    assert await env.counter("expired") == 3
    assert sorted(await env.raw.hkeys(DINING.queued)) == sorted(waits)
    assert await env.arrived() == 2
    # The bucket is spent: its list and its entry in `expiring` are gone.
    assert not await env.raw.exists(bucket)
    assert await env.raw.zscore(DINING.expiring, str(bucket_start(bucket))) is None
    stats = await env.queue.stats("dining")
    assert stats.queued == 2
    assert stats.counters["enqueued"] == stats.counters["expired"] + 2
    # Enqueued first, their entries are at the list's tail: trimmed off it.
    assert await env.raw.lrange(DINING.queue, 0, -1) == waits[::-1]
    assert await env.queue.cleanup("dining") == []  # nothing twice
    assert await env.counter("expired") == 3


async def test_entries_of_expired_jobs_behind_a_waiting_job_stay_on_the_list(env: Env) -> None:
    """Only the tail is trimmed (an LREM would cost O(list)): an expired job's entry
    head-ward of a job that still waits stays (lazy removal: the worker that pops it
    drops it, test_lazy_expiry.py), until the entries tail-ward of it are gone."""
    (waits,) = await env.enqueue(1)
    due = await env.enqueue(2)
    await make_packed_due(env.raw, DINING, due)
    assert sorted(await env.queue.cleanup("dining")) == sorted(due)
    assert await env.counter("expired") == 2
    assert await env.raw.lrange(DINING.queue, 0, -1) == [*due[::-1], waits]
    assert await env.raw.hkeys(DINING.queued) == [waits]
    # The waiting job taken, the stale entries reach the tail: the next cleanup trims them.
    assert await env.claim(waits) == [waits]
    assert await env.queue.cleanup("dining") == []
    assert await env.raw.lrange(DINING.queue, 0, -1) == []
    assert await env.counter("expired") == 2


async def test_a_bucket_not_yet_wholly_past_waits_though_its_jobs_are_due(env: Env) -> None:
    """A deadline at the start of the bucket Redis TIME is in: the job is past it (a claim
    would expire it), but the cleanup waits for the bucket's end. Tried until one try
    runs within one bucket (a try that crosses a bucket's end proves nothing). A job in
    deadline order, not due, waits at the list's tail: the tail walk stops there, so
    only the bucket could expire the job (at the tail, the walk would: next test)."""
    tail = await env.enqueue_in_order()
    (job_id,) = await env.enqueue(1)
    for _ in range(20):
        now = await env.redis_ms()
        start = now - now % EXPIRY_BUCKET_MS
        await make_packed_due(env.raw, DINING, [job_id], deadline_ms=start)
        expired = await env.queue.cleanup("dining")
        after = await env.redis_ms()
        if after - after % EXPIRY_BUCKET_MS == start:
            break
        if expired:  # crossed into the next bucket: the job's bucket was past by then
            pytest.fail("a try crossed a bucket's end, and the job is gone: cannot retry")
    else:
        pytest.fail("no try ran within one expiry bucket")
    assert expired == []
    assert await env.raw.hget(DINING.queued, job_id) is not None
    assert await env.counter("expired") == 0
    assert await env.raw.lrange(DINING.expiring_bucket(start), 0, -1) == [job_id]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [job_id, tail]


async def test_at_the_tail_a_due_job_is_expired_before_its_bucket_is_past(env: Env) -> None:
    """The tail walk expires any packed job past its deadline it meets, bucket or not;
    its bucket entry is then a stale one, which the bucket's expiry skips."""
    (job_id,) = await env.enqueue(1)
    now = await env.redis_ms()
    deadline = await make_packed_due(
        env.raw, DINING, [job_id], deadline_ms=now - now % EXPIRY_BUCKET_MS
    )
    connection = env.queue.connection
    report = await expire_in_order(
        connection.run_script, connection.execute_many, connection.refusal,
        connection.scripts.expire_tail, DINING,
    )  # fmt: skip
    assert report.expired == (job_id,)
    assert await env.raw.lrange(DINING.queue, 0, -1) == []
    assert await env.raw.lrange(DINING.expiring_bucket(deadline), 0, -1) == [job_id]
    result = await env.queue.get_result(job_id, "dining")
    assert result is not None and result.status == QueueState.EXPIRED
    assert await env.queue.cleanup("dining") == []  # not expired twice, whenever it runs
    assert await env.counter("expired") == 1


TRACED = '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'
"""A trace context line as the enqueue packs it (the second line of the value)."""


async def with_trace(client: RedisClient, job_id: str, trace: str) -> None:
    """Rewrite the trace context line of the packed `job_id`, as an enqueue inside a
    trace would have written it."""
    header, _, payload = (await client.hget(DINING.queued, job_id)).split("\n", 2)
    await client.hset(DINING.queued, job_id, f"{header}\n{trace}\n{payload}")


async def test_each_expired_job_comes_back_with_its_trace_context(env: Env) -> None:
    """The worker logs each expiry under the trace its job was created in: the report
    carries each expired job's trace context at its id's position, '' for none. A job in
    deadline order, not due, at the tail stops the tail walk: the bucket expires them."""
    tail = await env.enqueue_in_order()
    plain, traced = await env.enqueue(2)
    await with_trace(env.raw, traced, TRACED)
    await make_packed_due(env.raw, DINING, [plain, traced])

    report = await Chores(env.queue.connection, "dining").expire_due()
    assert report == ExpireReport(expired=(plain, traced), traces=("", TRACED))
    assert await env.raw.lrange(DINING.queue, 0, -1) == [traced, plain, tail]
    assert await env.counter("expired") == 2


async def test_entries_of_jobs_claimed_since_are_skipped(env: Env) -> None:
    """A claim leaves its job's bucket entry (an LREM would cost O(bucket)): the cleanup
    passes over it. The running job's own deadline is left ahead, so the expiry of jobs
    with a job hash leaves it too: what is tested is the bucket entry alone."""
    claimed, waiting = await env.enqueue(2)
    assert await env.claim(claimed) == [claimed]
    assert await env.raw.hget(DINING.queued, claimed) is None
    # The bucket entry of the claimed job stays; move it, as time would, into a past
    # bucket, at its head, beside a job still packed.
    ahead = int(await env.raw.hget(DINING.job(claimed), "expires_at"))
    assert await env.raw.lrange(DINING.expiring_bucket(ahead), 0, -1) == [claimed, waiting]
    deadline = await make_packed_due(env.raw, DINING, [waiting])
    bucket = DINING.expiring_bucket(deadline)
    await env.raw.lrem(DINING.expiring_bucket(ahead), 1, claimed)
    await env.raw.lpush(bucket, claimed)
    assert await env.raw.lrange(bucket, 0, -1) == [claimed, waiting]

    assert await env.queue.cleanup("dining") == [waiting]
    assert await env.raw.hmget(DINING.job(claimed), ["state", "token"]) == ["running", "token-1"]
    assert not await env.raw.exists(DINING.result(claimed))
    assert await env.counter("expired") == 1 and await env.counter("started") == 1
    assert not await env.raw.exists(bucket, DINING.queued, DINING.arrived, DINING.arrivals)


async def test_a_job_expired_by_a_claim_is_not_expired_again(env: Env) -> None:
    first, second = await env.enqueue(2)
    deadline = await make_packed_due(env.raw, DINING, [first, second])
    events = env.queue.completions(watch=[("dining", first), ("dining", second)])
    assert await env.claim(first) == []  # expired on the spot
    assert await env.counter("expired") == 1
    assert await env.raw.lrange(DINING.expiring_bucket(deadline), 0, -1) == [first, second]

    assert await env.queue.cleanup("dining") == [second]
    completions = [await asyncio.wait_for(anext(events), 10) for _ in range(2)]
    await events.aclose()
    assert sorted(c.job_id for c in completions) == sorted([first, second])
    assert await env.counter("expired") == 2
    assert await env.counter("started") == 0
    for job_id in (first, second):
        result = await env.queue.get_result(job_id, "dining")
        assert result is not None and result.status == QueueState.EXPIRED
    assert not await env.raw.exists(DINING.queued, DINING.arrived, DINING.arrivals)


@pytest.mark.parametrize(
    "header",
    ["{enq},soon,{ttl},3,n", "{enq},{exp},0{ttl},3,n", "{enq},{exp},0,3,n"],
    ids=["expires_at-garbage", "ttl-leading-zero", "ttl-zero"],
)
async def test_a_packed_value_that_does_not_parse_is_expired_with_its_problem(
    env: Env, caplog: pytest.LogCaptureFixture, header: str
) -> None:
    """One poison value must not stall the cleanup of its bucket: expired all the same,
    its result kept for CORRUPT_RESULT_TTL_SECONDS (its own ttl cannot be read). A ttl
    with a leading zero is one: SET EX refuses "0600", and would have failed the script
    after its first write."""
    poison, healthy = await env.enqueue(2)
    await make_packed_due(env.raw, DINING, [poison, healthy])
    enqueued_at, expires_at = (await env.raw.hget(DINING.queued, poison)).split(",")[:2]
    planted = header.format(enq=enqueued_at, exp=expires_at, ttl=TTL)
    await env.raw.hset(DINING.queued, poison, f"{planted}\n\n{{}}")
    caplog.set_level(logging.WARNING, "platform_common.jobs.queue.expiry")

    assert sorted(await env.queue.cleanup("dining")) == sorted([poison, healthy])
    result = await env.queue.get_result(poison, "dining")
    assert result is not None and result.status == QueueState.EXPIRED
    assert "stored packed job does not parse" in (result.error or "")
    kept = await env.raw.ttl(DINING.result(poison))
    assert CORRUPT_RESULT_TTL_SECONDS - 60 < kept <= CORRUPT_RESULT_TTL_SECONDS
    assert poison in {getattr(record, "job_id", None) for record in caplog.records}
    assert await env.counter("expired") == 2
    assert not await env.raw.exists(DINING.queued, DINING.arrived, DINING.arrivals)


async def test_every_bucket_past_is_expired_in_one_cleanup_and_the_arrivals_empty(
    env: Env,
) -> None:
    """Jobs in several past buckets, more than one chunk's worth in none (the chunking is
    expiry.py's), enqueued in several calls: after the cleanup nothing waits and the
    arrival counts are empty."""
    ids: list[str] = []
    for _ in range(3):
        ids += await env.enqueue(4)
    now = await env.redis_ms()
    for index, job_id in enumerate(ids):
        # Three past buckets, a bucket apart.
        past = now - 2 * EXPIRY_BUCKET_MS - (index % 3) * EXPIRY_BUCKET_MS
        await make_packed_due(env.raw, DINING, [job_id], deadline_ms=past)
    assert await env.raw.zcard(DINING.expiring) == 3
    assert sorted(await env.queue.cleanup("dining")) == sorted(ids)
    assert await env.counter("expired") == len(ids)
    assert not await env.raw.exists(DINING.queued, DINING.arrived, DINING.arrivals)
    assert not await env.raw.exists(DINING.expiring)
    for result in [await env.queue.get_result(job_id, "dining") for job_id in ids]:
        assert result is not None and result.status == QueueState.EXPIRED
    assert (await env.queue.stats("dining")).queued == 0


# -- faults ------------------------------------------------------------------------------
WRONG_TYPES: dict[str, tuple[str, ...]] = {
    "string": ("SET", "KEY", "not what the queue wrote"),
    "list": ("RPUSH", "KEY", "a"),
    "set": ("SADD", "KEY", "a"),
    "zset": ("ZADD", "KEY", "0", "a"),
    "hash": ("HSET", "KEY", "a", "1"),
    "stream": ("XADD", "KEY", "*", "a", "1"),
}
# Every key the packed expiry writes, and the type it must hold; `bucket` is the bucket
# list of the due jobs.
KEY_TYPES = {
    "queued": "hash",
    "stats": "hash",
    "arrivals": "zset",
    "arrived": "hash",
}
FAULTS = [
    (role, kind) for role, right in KEY_TYPES.items() for kind in WRONG_TYPES if kind != right
]


async def due_pair(env: Env) -> tuple[list[str], str]:
    """Two packed jobs in one past bucket (and one not due): their ids and bucket."""
    due = await env.enqueue(2)
    await env.enqueue(1)
    deadline = await make_packed_due(env.raw, DINING, due)
    return due, DINING.expiring_bucket(deadline)


async def plant(client: RedisClient, key: str, kind: str) -> None:
    await client.delete(key)
    await client.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))


async def refused(env: Env, key: str, problem: str) -> None:
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await env.queue.cleanup("dining")
    assert (info.value.key, info.value.problem) == (key, problem)
    assert changed_keys(before, await env.snapshot()) == set()


@pytest.mark.parametrize(("role", "kind"), FAULTS, ids=[f"{r}={k}" for r, k in FAULTS])
async def test_a_key_of_another_type_is_named_and_nothing_is_written(
    env: Env, role: str, kind: str
) -> None:
    await due_pair(env)
    key: str = getattr(DINING, role)
    await plant(env.raw, key, kind)
    await refused(env, key, f"holds a {kind}, where the queue keeps a {KEY_TYPES[role]}")


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"zset"}))
async def test_an_expiring_set_of_another_type_is_named_and_nothing_is_written(
    env: Env, kind: str
) -> None:
    await due_pair(env)
    await plant(env.raw, DINING.expiring, kind)
    await refused(env, DINING.expiring, f"holds a {kind}, where the queue keeps a zset")


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"list"}))
async def test_a_bucket_of_another_type_is_named_and_nothing_is_written(
    env: Env, kind: str
) -> None:
    _, bucket = await due_pair(env)
    await plant(env.raw, bucket, kind)
    await refused(env, bucket, f"holds a {kind}, where the queue keeps a list")


NOT_INTEGERS = ["many", "1.5", "1e3", " 7", "9223372036854775807", "007", "-0"]
"""Stored counts HINCRBY refuses: the last two read as integers, but Redis's own integer
text has no leading zero and no "-0"."""


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_a_malformed_expired_counter_is_named_and_nothing_is_written(
    env: Env, value: str
) -> None:
    await due_pair(env)
    await env.raw.hset(DINING.stats, "expired", value)
    await refused(env, DINING.stats, f"field expired is not an integer: '{value}'")


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_a_malformed_arrival_count_is_named_and_nothing_is_written(
    env: Env, value: str
) -> None:
    due, _ = await due_pair(env)
    enqueued_at = int((await env.raw.hget(DINING.queued, due[0])).split(",", 1)[0])
    second = enqueued_at - enqueued_at % ARRIVAL_BUCKET_MS
    await env.raw.hset(DINING.arrived, str(second), value)
    await refused(env, DINING.arrived, f"field {second} is not an integer: '{value}'")


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_a_result_key_of_any_type_is_replaced_by_the_expired_result(
    env: Env, kind: str
) -> None:
    due, _ = await due_pair(env)
    await plant(env.raw, DINING.result(due[0]), kind)
    assert sorted(await env.queue.cleanup("dining")) == sorted(due)
    for job_id in due:
        result = await env.queue.get_result(job_id, "dining")
        assert result is not None and result.status == QueueState.EXPIRED
    assert await env.counter("expired") == 2


async def test_after_a_refusal_the_cleanup_expires_every_job(env: Env) -> None:
    due, bucket = await due_pair(env)
    await env.raw.hset(DINING.stats, "expired", "many")
    with pytest.raises(CorruptQueueState):
        await env.queue.cleanup("dining")
    await env.raw.hdel(DINING.stats, "expired")
    assert sorted(await env.queue.cleanup("dining")) == sorted(due)
    assert await env.counter("expired") == 2
    assert not await env.raw.exists(bucket)
    assert await env.arrived() == 1
    payloads = [json.loads(v.split("\n", 2)[2]) for v in await env.raw.hvals(DINING.queued)]
    assert len(payloads) == 1 and payloads[0]["ttl_seconds"] == TTL
