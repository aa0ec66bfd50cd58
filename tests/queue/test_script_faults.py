"""Fault injection for the queue's scripts (every `queue_*.lua` but queue_expire.lua, which
has its own): each key a script touches is planted with the wrong type or a malformed
value, the public operation runs, and the outcome is either success with a consistent
state or the package's CorruptQueueState naming the key with the whole keyspace
unchanged (DUMP and absolute expiry of every key compared). Redis does not undo a
script that fails midway, so "unchanged" is the proof that every check ran before the
first write.

Every case runs on a single Redis server; on the Redis Cluster (tests/queue/conftest.py)
one case per key role and mode, the planted type or value rotating (`cluster_sample`,
tests/support/backends.py). What is planted is a key's content, which a script sees alike
on either; the cluster adds that a script's keys share one slot and that its refusals
come back through the cluster client, which one case per key proves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from platform_common.jobs.errors import CorruptQueueState, InvalidPayload, LeaseLost
from platform_common.jobs.keys import (
    ARRIVAL_BUCKET_MS,
    EXPIRY_BUCKET_MS,
    QueueKeys,
    histogram_exemplar_field,
)
from platform_common.jobs.queue import JobQueue, QueueState
from platform_common.jobs.queue.cancel import cancel_jobs
from platform_common.jobs.worker import Claim
from platform_common.jobs.worker.progress_reporter import store_progress
from tests.support.keyspace import changed_keys
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.stored_jobs import hold_deadline_mark, make_packed_due

FAULT_QUEUE = pytest.mark.queue(max_attempts=2, register=("dining",))
"""The queue of the fault tests (test_claim_take.py's too)."""
pytestmark = [
    pytest.mark.cluster_sample(planted=("kind", "value", "field", "fault")),
    FAULT_QUEUE,
    pytest.mark.valkey,
]

DINING = QueueKeys("dining")
TOKEN = "token-1"


@dataclass
class Env(QueueEnv):
    async def queued(self, **overrides: Any) -> str:
        job_id: str = await self.queue.enqueue(make_job(**overrides))
        return job_id

    async def running(self) -> Claim:
        """A job taken and claimed (lease token TOKEN), as a worker holds it."""
        job_id = await self.queued()
        assert await self.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
        _, claims = await self.leases.claim("worker-1", [(job_id, TOKEN)])
        assert [claim.job_id for claim in claims] == [job_id]
        return claims[0]

    async def dead(self) -> str:
        """A dead letter (its stored job did not parse: dead-lettered at once)."""
        claim = await self.running()
        await self.leases.fail(claim.job_id, TOKEN, "boom", mode="corrupt")
        assert await self.raw.lindex(DINING.dead, 0) == claim.job_id
        return claim.job_id

    async def due_retry(self) -> str:
        """A failed attempt waiting in the delayed set, due now."""
        claim = await self.running()
        assert await self.leases.fail(claim.job_id, TOKEN, "boom") == QueueState.RETRYING
        await self.raw.zadd(DINING.delayed, {claim.job_id: 0}, xx=True)
        return claim.job_id

    async def out_of_order(self) -> None:
        """Jobs enqueued next are out of deadline order (a mark a day ahead), so the
        enqueue writes their expiry bucket: the only path that touches the bucket keys."""
        await hold_deadline_mark(self.raw, DINING)

    async def plant(self, key: str, kind: str) -> None:
        await self.raw.delete(key)
        await self.raw.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))

    async def counter(self, field: str) -> str | None:
        value: str | None = await self.raw.hget(DINING.stats, field)
        return value


# -- the faults --------------------------------------------------------------------------
# A command that makes a key of each type (KEY is replaced by the key).
WRONG_TYPES: dict[str, tuple[str, ...]] = {
    "string": ("SET", "KEY", "not what the queue wrote"),
    "list": ("RPUSH", "KEY", "a"),
    "set": ("SADD", "KEY", "a"),
    "zset": ("ZADD", "KEY", "0", "a"),
    "hash": ("HSET", "KEY", "a", "1"),
    "stream": ("XADD", "KEY", "*", "a", "1"),
}


def wrong_types(*roles: tuple[str, str]) -> list[Any]:
    """pytest params (role, kind): every type but the one the queue keeps at `role`."""
    return [
        pytest.param(role, kind, id=f"{role}-{kind}")
        for role, native in roles
        for kind in sorted(WRONG_TYPES)
        if kind != native
    ]


NOT_INTEGERS = ["many", "1.5", "1e3", " 7", "9223372036854775807"]
"""Stored counters HINCRBY refuses (the last would overflow)."""
NOT_CANONICAL = ["007", "-0"]
"""Stored counters that read as integers but that HINCRBY refuses too (Redis's integer
text has no leading zero and no "-0"); tried on the scripts that check for them."""


def key_of(role: str, job_id: str = "") -> str:
    if role == "job":
        return DINING.job(job_id)
    if role == "result":
        return DINING.result(job_id)
    key: str = getattr(DINING, role)
    return key


async def refused(env: Env, operation: Callable[[], Awaitable[Any]], key: str) -> CorruptQueueState:
    """The operation raises CorruptQueueState naming `key` and changes nothing; returns
    the refusal."""
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await operation()
    assert info.value.key == key, info.value
    assert changed_keys(before, await env.snapshot()) == set()
    return info.value


# -- queue_enqueue: JobQueue.enqueue and enqueue_many ------------------------------------
# Every key enqueue writes: `bucket` is the expiry bucket list of the jobs' deadline.
ENQUEUE_KEYS = wrong_types(
    ("queue", "list"),
    ("stats", "hash"),
    ("queued", "hash"),
    ("expiring", "zset"),
    ("arrivals", "zset"),
    ("arrived", "hash"),
    ("bucket", "list"),
    ("deadline_mark", "string"),
)
BUCKET_ROLES = ("expiring", "bucket")
"""The keys only a job out of deadline order is written to (a job in order has no
bucket entry): their cases put the jobs out of order first."""


class Created:
    """Jobs created at one whole second, now (each test makes its own: a created_at plus
    ttl in the past is refused), so a test knows the expiry bucket of its jobs."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC).replace(microsecond=0)

    def job(self, ttl_seconds: int = 60) -> dict[str, Any]:
        """A job created at `at`: its deadline's bucket is bucket(ttl_seconds)."""
        return make_job(created_at=self.at.isoformat(), ttl_seconds=ttl_seconds)

    def bucket(self, ttl_seconds: int = 60) -> str:
        return DINING.expiring_bucket(int(self.at.timestamp()) * 1000 + ttl_seconds * 1000)

    def key(self, role: str) -> str:
        """The key of an enqueue role: `bucket` is that of the jobs' deadline."""
        return self.bucket() if role == "bucket" else key_of(role)


@pytest.mark.parametrize(("role", "kind"), ENQUEUE_KEYS)
async def test_enqueue_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    created = Created()
    if role in BUCKET_ROLES:
        await env.out_of_order()
    await env.plant(created.key(role), kind)
    await refused(env, lambda: env.queue.enqueue(created.job()), created.key(role))


@pytest.mark.parametrize(("role", "kind"), ENQUEUE_KEYS)
async def test_enqueue_many_refuses_a_queue_key_of_another_type(
    env: Env, role: str, kind: str
) -> None:
    created = Created()
    if role in BUCKET_ROLES:
        await env.out_of_order()
    await env.plant(created.key(role), kind)
    jobs = [created.job() for _ in range(3)]
    await refused(env, lambda: env.queue.enqueue_many(jobs), created.key(role))


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"list"}))
async def test_enqueue_many_refuses_the_bucket_of_a_later_job(env: Env, kind: str) -> None:
    """Jobs whose deadlines fall in two buckets: the second one's is checked before any
    write too (one RPUSH per bucket, all after every check)."""
    later = 60 + EXPIRY_BUCKET_MS // 1000
    created = Created()
    assert created.bucket(60) != created.bucket(later)
    # Out of deadline order, every job has its bucket entry (in order, none would).
    await env.out_of_order()
    await env.plant(created.bucket(later), kind)
    jobs = [created.job(60), created.job(60), created.job(later), created.job(60)]
    await refused(env, lambda: env.queue.enqueue_many(jobs), created.bucket(later))


@pytest.mark.parametrize("role", BUCKET_ROLES)
async def test_a_job_in_deadline_order_leaves_the_bucket_keys_alone(env: Env, role: str) -> None:
    """The first job (no mark) is in deadline order: it has no bucket entry, so the
    enqueue neither checks nor writes the bucket keys, whatever they hold."""
    created = Created()
    await env.plant(created.key(role), "string")
    job_id = await env.queue.enqueue(created.job())
    assert await env.raw.hget(DINING.queued, job_id) is not None
    assert await env.raw.get(created.key(role)) == "not what the queue wrote"


NOT_A_MARK = ["007", "-5", "abc", "0", "1" * 16]
"""Deadline marks that are not a canonical positive integer of at most 15 digits (more
would lose precision as a Lua number)."""


@pytest.mark.parametrize("value", NOT_A_MARK)
async def test_enqueue_refuses_a_deadline_mark_that_is_not_an_integer(env: Env, value: str) -> None:
    """The mark decides every job's order: one that does not parse is refused before the
    first write, alone or in a batch."""
    await env.raw.set(DINING.deadline_mark, value)
    created = Created()
    for operation in (
        lambda: env.queue.enqueue(created.job()),
        lambda: env.queue.enqueue_many([created.job() for _ in range(3)]),
    ):
        refusal = await refused(env, operation, DINING.deadline_mark)
        assert refusal.problem == "deadline mark is not an integer"
    assert await env.raw.get(DINING.deadline_mark) == value


async def test_enqueue_refuses_an_arrival_count_that_is_not_an_integer(env: Env) -> None:
    """The count of the second the script runs in (Redis TIME): every second around now
    is planted, so whichever it is, it does not parse."""
    seconds, _ = await env.raw.time()
    planted: dict[str, str] = {}
    for offset in range(-2, 30):
        ms = (int(seconds) + offset) * 1000
        planted[str(ms - ms % ARRIVAL_BUCKET_MS)] = NOT_INTEGERS[offset % len(NOT_INTEGERS)]
    await env.raw.hset(DINING.arrived, mapping=planted)
    created = Created()
    await refused(env, lambda: env.queue.enqueue(created.job()), DINING.arrived)
    jobs = [created.job() for _ in range(3)]
    await refused(env, lambda: env.queue.enqueue_many(jobs), DINING.arrived)


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_enqueue_refuses_a_malformed_enqueued_counter(env: Env, value: str) -> None:
    await env.raw.hset(DINING.stats, "enqueued", value)
    await refused(env, lambda: env.queue.enqueue(make_job()), DINING.stats)
    await refused(env, lambda: env.queue.enqueue_many([make_job(), make_job()]), DINING.stats)


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_enqueue_refuses_a_job_key_of_another_type(env: Env, kind: str) -> None:
    job = make_job()
    await env.plant(DINING.job(job["job_id"]), kind)
    await refused(env, lambda: env.queue.enqueue(job), DINING.job(job["job_id"]))


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_enqueue_many_refuses_an_id_whose_key_holds_anything(env: Env, kind: str) -> None:
    jobs = [make_job() for _ in range(3)]
    await env.plant(DINING.job(jobs[1]["job_id"]), kind)
    before = await env.snapshot()
    with pytest.raises(InvalidPayload) as info:
        await env.queue.enqueue_many(jobs)
    assert info.value.errors == {"jobs[1].job_id": f"job {jobs[1]['job_id']!r} already exists"}
    assert await env.snapshot() == before


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_enqueue_of_an_id_whose_result_key_holds_anything_is_a_duplicate(
    env: Env, kind: str
) -> None:
    job = make_job()
    await env.plant(DINING.result(job["job_id"]), kind)
    before = await env.snapshot()
    with pytest.raises(InvalidPayload) as info:
        await env.queue.enqueue(job)
    assert info.value.errors == {"job_id": f"job {job['job_id']!r} already exists"}
    with pytest.raises(InvalidPayload):
        await env.queue.enqueue_many([make_job(), job])
    assert await env.snapshot() == before


@pytest.mark.parametrize(
    "fault",
    [("TYPE", "string"), ("FIELD", "many"), ("FIELD", "2.5")],
    ids=["stats-string", "bucket-many", "bucket-2.5"],
)
async def test_a_new_producer_refuses_corrupt_stats_before_registering(
    env: Env, fault: tuple[str, str]
) -> None:
    """register_type (the first enqueue of a process) writes the type set and the
    bucket fields: a corrupt stats hash stops it before either."""
    how, value = fault
    if how == "TYPE":
        await env.plant(DINING.stats, value)
    else:
        await env.raw.hset(DINING.stats, "latency_le:0.5", value)
    async with await JobQueue.connect(env.queue.settings) as fresh:
        await refused(env, lambda: fresh.enqueue(make_job()), DINING.stats)


async def test_enqueue_after_a_refusal_writes_whole_jobs(env: Env) -> None:
    created = Created()
    await env.out_of_order()  # so the jobs use the expiring set and their bucket
    await env.plant(DINING.expiring, "string")
    with pytest.raises(CorruptQueueState):
        await env.queue.enqueue_many([created.job() for _ in range(3)])
    await env.raw.delete(DINING.expiring)
    ids = await env.queue.enqueue_many([created.job() for _ in range(3)])
    assert await env.raw.lrange(DINING.queue, 0, -1) == ids[::-1]
    assert sorted(await env.raw.hkeys(DINING.queued)) == sorted(ids)
    assert await env.raw.lrange(created.bucket(), 0, -1) == ids
    start = int(created.bucket().rsplit(":", 1)[1])
    assert await env.raw.zrange(DINING.expiring, 0, -1, withscores=True) == [(str(start), start)]
    assert sum(int(count) for count in await env.raw.hvals(DINING.arrived)) == 3
    assert await env.raw.zcard(DINING.arrivals) == await env.raw.hlen(DINING.arrived)
    assert await env.counter("enqueued") == "3"


# -- queue_enqueue, scheduled: enqueue and enqueue_many with a delay or run_at ---------------
@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
@pytest.mark.parametrize(
    ("role", "kind"), wrong_types(("delayed", "zset"), ("expiry", "zset"), ("stats", "hash"))
)
async def test_a_scheduled_enqueue_refuses_a_queue_key_of_another_type(
    env: Env, role: str, kind: str, many: bool
) -> None:
    await env.plant(key_of(role), kind)

    async def enqueue() -> None:
        if many:
            await env.queue.enqueue_many([make_job() for _ in range(3)], delay=30)
        else:
            await env.queue.enqueue(make_job(), delay=30)

    await refused(env, enqueue, key_of(role))


@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
async def test_a_scheduled_enqueue_refuses_a_malformed_enqueued_counter(
    env: Env, value: str
) -> None:
    await env.raw.hset(DINING.stats, "enqueued", value)
    await refused(env, lambda: env.queue.enqueue(make_job(), delay=30), DINING.stats)


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_a_scheduled_enqueue_refuses_a_job_key_of_another_type(env: Env, kind: str) -> None:
    job = make_job()
    await env.plant(DINING.job(job["job_id"]), kind)
    await refused(env, lambda: env.queue.enqueue(job, delay=30), DINING.job(job["job_id"]))


async def test_a_scheduled_job_hash_is_the_one_a_retry_waits_with(env: Env) -> None:
    """What the claim, the expiry and the dead-letter requeue read: every field parses."""
    job_id = await env.queue.enqueue(make_job(ttl_seconds=90), delay=10)
    fields = await env.raw.hgetall(DINING.job(job_id))
    assert set(fields) == {
        "payload", "enqueued_at", "expires_at", "ttl", "max_attempts", "nonce", "run_at",
    }  # fmt: skip
    assert fields["ttl"] == "90" and fields["max_attempts"] == "2"
    assert int(fields["expires_at"]) - int(fields["run_at"]) < 90_000


# -- queue_complete: AttemptCalls.complete -----------------------------------------------------
COMPLETE_KEYS = wrong_types(
    ("processing", "list"),
    ("leases", "zset"),
    ("expiry", "zset"),
    ("stats", "hash"),
    ("cancels", "hash"),
)


@pytest.mark.parametrize(("role", "kind"), COMPLETE_KEYS)
async def test_complete_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    claim = await env.running()
    await env.plant(key_of(role), kind)
    await refused(env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), key_of(role))


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_complete_refuses_a_job_key_of_another_type(env: Env, kind: str) -> None:
    claim = await env.running()
    await env.plant(DINING.job(claim.job_id), kind)
    await refused(
        env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), DINING.job(claim.job_id)
    )


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_complete_replaces_a_result_key_of_any_type(env: Env, kind: str) -> None:
    claim = await env.running()
    await env.plant(DINING.result(claim.job_id), kind)
    await env.leases.complete(claim.job_id, TOKEN, '{"ok":true}')
    outcome = await env.queue.get_result(claim.job_id, "dining")
    assert outcome is not None and (outcome.status, outcome.result) == ("succeeded", {"ok": True})
    assert 0 < await env.raw.ttl(DINING.result(claim.job_id)) <= 60
    assert await env.raw.hget(DINING.job(claim.job_id), "state") == "succeeded"
    assert await env.counter("completed") == "1"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("enqueued_at", "soon"),
        ("enqueued_at", "1.7e12"),
        ("enqueued_at", None),
        ("ttl", "0"),
        ("ttl", "sixty"),
        ("ttl", "1e3"),
        ("ttl", "9" * 16),
        ("ttl", "060"),  # int() reads it; SET EX refuses it as stored
        ("ttl", None),
    ],
    ids=repr,
)
async def test_complete_refuses_a_job_field_that_does_not_parse(
    env: Env, field: str, value: str | None
) -> None:
    claim = await env.running()
    job_key = DINING.job(claim.job_id)
    if value is None:
        await env.raw.hdel(job_key, field)
    else:
        await env.raw.hset(job_key, field, value)
    await refused(env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), job_key)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *(("completed", value) for value in NOT_INTEGERS + NOT_CANONICAL),
        ("latency_count", "many"),
        ("latency_le:+Inf", "1.5"),
        ("latency_sum", "fast"),
        ("latency_sum", "inf"),
        ("latency_sum", "nan"),
        ("latency_sum", " 1.5"),
    ],
    ids=repr,
)
async def test_complete_refuses_a_stats_field_that_does_not_parse(
    env: Env, field: str, value: str
) -> None:
    claim = await env.running()
    for bucket in await env.raw.hkeys(DINING.stats):
        if bucket.startswith("latency_le:") and field.startswith("latency_le:"):
            await env.raw.hset(DINING.stats, bucket, value)  # whichever bucket it lands in
    await env.raw.hset(DINING.stats, field, value)
    await refused(env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), DINING.stats)


async def test_a_worker_fails_a_job_its_completion_cannot_count(redis_url: str, env: Env) -> None:
    """The handler ran, but the completed counter does not parse: the completion is
    refused whole, and the worker dead-letters the job with the problem (counted as
    failed, so enqueued == completed + failed + expired + live still holds)."""
    job_id = await env.queued()
    await env.raw.hset(DINING.stats, "completed", "many")

    async def handler(job: object) -> str:
        return "done"

    settings = fast_settings(redis_url, max_attempts=2)
    async with running_worker(settings, handler):
        letters = await eventually(lambda: env.queue.dead_letters.list("dining"))
    assert [letter.job_id for letter in letters] == [job_id]
    assert "field completed is not an integer" in letters[0].last_error
    assert await env.counter("completed") == "many"
    assert (await env.counter("failed"), await env.counter("enqueued")) == ("1", "1")
    outcome = await env.queue.get_result(job_id, "dining")
    assert outcome is not None and outcome.status == "failed"


# -- queue_renew: AttemptCalls.renew -----------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"zset"}))
async def test_renew_refuses_a_leases_key_of_another_type(env: Env, kind: str) -> None:
    claim = await env.running()
    await env.plant(DINING.leases, kind)
    await refused(env, lambda: env.leases.renew([(claim.job_id, TOKEN)]), DINING.leases)


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_renew_reports_a_job_key_of_another_type_lost_and_renews_the_rest(
    env: Env, kind: str
) -> None:
    healthy = await env.running()
    await env.raw.zadd(DINING.leases, {healthy.job_id: 1})  # renewal moves this deadline
    broken = "broken-job"
    await env.plant(DINING.job(broken), kind)
    before = await env.snapshot()
    lost = await env.leases.renew([(broken, TOKEN), (healthy.job_id, TOKEN)])
    assert lost == [broken]
    assert changed_keys(before, await env.snapshot()) == {DINING.leases.encode()}
    assert (await env.raw.zscore(DINING.leases, healthy.job_id) or 0) > 1


# -- queue_progress: a handler's report_progress (worker/progress_reporter.py) ---------------
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_progress_refuses_a_job_key_of_another_type(env: Env, kind: str) -> None:
    job_id = "broken-job"
    await env.plant(DINING.job(job_id), kind)
    report = '{"step": 1}'
    await refused(
        env,
        lambda: store_progress(env.queue.connection, DINING, job_id, TOKEN, report),
        DINING.job(job_id),
    )


@pytest.mark.parametrize("field", ["state", "token"])
async def test_progress_of_a_job_hash_without_its_lease_fields_is_lost(
    env: Env, field: str
) -> None:
    """The two fields it reads are compared as text, so nothing there can fail to parse:
    a record that lost one (or holds anything else) is not this attempt's."""
    claim = await env.running()
    await env.raw.hdel(DINING.job(claim.job_id), field)
    before = await env.snapshot()
    with pytest.raises(LeaseLost):
        await store_progress(env.queue.connection, DINING, claim.job_id, TOKEN, '{"a":1}')
    assert changed_keys(before, await env.snapshot()) == set()


# -- queue_heartbeat: Chores.heartbeat ----------------------------------------------
@pytest.mark.parametrize("leaving", [False, True], ids=["beat", "leave"])
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"zset"}))
async def test_heartbeat_refuses_a_workers_key_of_another_type(
    env: Env, kind: str, leaving: bool
) -> None:
    await env.plant(DINING.workers, kind)
    await refused(env, lambda: env.chores.heartbeat("worker-1", leaving=leaving), DINING.workers)


# -- queue_history: Chores.record_history ---------------------------------------------
@pytest.mark.parametrize(
    ("role", "kind"),
    wrong_types(("history", "stream"), ("stats", "hash"), ("queued", "hash"), ("waiting", "zset"),
                ("processing", "list"), ("delayed", "zset"), ("dead", "list")),
)  # fmt: skip
async def test_history_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    await env.queued()
    await env.plant(key_of(role), kind)
    await refused(env, env.chores.record_history, key_of(role))


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_history_leaves_out_a_counter_that_does_not_parse(env: Env, value: str) -> None:
    """The sample is written without it (the readers show that counter's gap): one
    counter someone broke does not stop the history of the rest."""
    await env.queued()
    await env.raw.hset(DINING.stats, "completed", value)
    before = await env.snapshot()
    assert (await env.chores.record_history()).wrote
    assert changed_keys(before, await env.snapshot()) == {DINING.history.encode()}
    [(_, fields)] = await env.raw.xrange(DINING.history)
    assert "completed" not in fields and fields["enqueued"] == "1" and fields["queued"] == "1"


# -- queue_promote: Chores.promote --------------------------------------------------
@pytest.mark.parametrize(
    ("role", "kind"), wrong_types(("delayed", "zset"), ("queue", "list"), ("waiting", "zset"))
)
async def test_promote_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    await env.due_retry()
    await env.plant(key_of(role), kind)
    await refused(env, env.chores.promote, key_of(role))


async def test_promote_moves_every_due_retry_in_one_step(env: Env) -> None:
    ids = [await env.due_retry() for _ in range(3)]
    assert await env.chores.promote() == 3
    assert sorted(await env.raw.lrange(DINING.queue, 0, -1)) == sorted(ids)
    assert await env.raw.zcard(DINING.delayed) == 0
    assert sorted(await env.raw.zrange(DINING.waiting, 0, -1)) == sorted(ids)


# -- queue_reap_scan: Chores.reap ---------------------------------------------------
@pytest.mark.parametrize(
    ("role", "kind"),
    wrong_types(("processing", "list"), ("leases", "zset"), ("queued", "hash"), ("queue", "list")),
)
async def test_reap_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    await env.queued()
    await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")  # taken, unclaimed
    await env.plant(key_of(role), kind)
    await refused(env, env.chores.reap, key_of(role))


# -- queue_dead_requeue: dead_letters.requeue --------------------------------------------
DEAD_KEYS = wrong_types(
    ("dead", "list"), ("queue", "list"), ("expiry", "zset"), ("stats", "hash"), ("waiting", "zset")
)


@pytest.mark.parametrize(("role", "kind"), DEAD_KEYS)
async def test_requeue_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    job_id = await env.dead()
    await env.plant(key_of(role), kind)
    await refused(env, lambda: env.queue.dead_letters.requeue("dining", [job_id]), key_of(role))


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_requeue_refuses_a_job_key_of_another_type(env: Env, kind: str) -> None:
    healthy = await env.dead()
    broken = await env.dead()
    await env.plant(DINING.job(broken), kind)
    await refused(
        env,
        lambda: env.queue.dead_letters.requeue("dining", [healthy, broken]),
        DINING.job(broken),
    )


@pytest.mark.parametrize("value", ["0", "sixty", "1e3", "9" * 13, None], ids=repr)
async def test_requeue_refuses_a_ttl_that_does_not_parse(env: Env, value: str | None) -> None:
    healthy = await env.dead()
    broken = await env.dead()
    if value is None:
        await env.raw.hdel(DINING.job(broken), "ttl")
    else:
        await env.raw.hset(DINING.job(broken), "ttl", value)
    await refused(
        env,
        lambda: env.queue.dead_letters.requeue("dining", [healthy, broken]),
        DINING.job(broken),
    )


@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
async def test_requeue_refuses_a_malformed_enqueued_counter(env: Env, value: str) -> None:
    job_id = await env.dead()
    await env.raw.hset(DINING.stats, "enqueued", value)
    await refused(env, lambda: env.queue.dead_letters.requeue("dining", [job_id]), DINING.stats)


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_requeue_clears_a_result_key_of_any_type(env: Env, kind: str) -> None:
    job_id = await env.dead()
    await env.plant(DINING.result(job_id), kind)
    assert await env.queue.dead_letters.requeue("dining", [job_id]) == [job_id]
    assert not await env.raw.exists(DINING.result(job_id))
    assert await env.raw.lrange(DINING.queue, 0, -1) == [job_id]
    state, expires_at = await env.raw.hmget(DINING.job(job_id), ["state", "expires_at"])
    assert state is None  # a job hash without a state is a queued job's
    assert expires_at.isdigit()  # integer digits, never 1.8e+12
    assert await env.raw.lrange(DINING.dead, 0, -1) == []
    assert await env.counter("enqueued") == "2"


async def test_requeue_drops_the_entry_of_a_record_that_is_gone(env: Env) -> None:
    gone = await env.dead()
    kept = await env.dead()
    await env.raw.delete(DINING.job(gone))
    assert await env.queue.dead_letters.requeue("dining", [gone, kept]) == [kept]
    assert await env.raw.lrange(DINING.dead, 0, -1) == []
    assert await env.raw.lrange(DINING.queue, 0, -1) == [kept]
    assert await env.counter("enqueued") == "3"  # two enqueues, one requeue


# -- queue_dead_purge: dead_letters.purge ------------------------------------------------
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"list"}))
async def test_purge_refuses_a_dead_list_of_another_type(env: Env, kind: str) -> None:
    job_id = await env.dead()
    await env.plant(DINING.dead, kind)
    await refused(env, lambda: env.queue.dead_letters.purge("dining", [job_id]), DINING.dead)


@pytest.mark.parametrize(("role", "kind"), wrong_types(("job", "hash"), ("result", "string")))
async def test_purge_deletes_a_record_or_result_of_any_type(env: Env, role: str, kind: str) -> None:
    job_id = await env.dead()
    await env.plant(key_of(role, job_id), kind)
    before = await env.snapshot()
    assert await env.queue.dead_letters.purge("dining", [job_id]) == 1
    changed = changed_keys(before, await env.snapshot())
    assert changed == {k.encode() for k in (DINING.dead, DINING.job(job_id), DINING.result(job_id))}
    assert not await env.raw.exists(DINING.dead, DINING.job(job_id), DINING.result(job_id))


# -- queue_pause: JobQueue.pause, resume (and pause_state, which reads the key) -----------
@pytest.mark.parametrize("call", ["pause", "resume", "pause_state"])
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"string"}))
async def test_pause_refuses_a_paused_key_of_another_type(env: Env, call: str, kind: str) -> None:
    await env.queued()
    await env.plant(DINING.paused, kind)
    await refused(env, lambda: getattr(env.queue, call)("dining"), DINING.paused)


# -- queue_limits: JobQueue.set_limits (and limits, which reads the key) ----------------
@pytest.mark.parametrize("call", ["set_limits", "limits"])
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_limits_refuse_a_limits_key_of_another_type(env: Env, call: str, kind: str) -> None:
    await env.plant(DINING.limits, kind)
    if call == "set_limits":
        await refused(env, lambda: env.queue.set_limits("dining", max_running=1), DINING.limits)
    else:
        await refused(env, lambda: env.queue.limits("dining"), DINING.limits)


# -- queue_cancel: JobQueue.cancel (and the cancel fence of complete and fail) ----------------
CANCEL_SHARED = [
    ("queued", "hash"),
    ("waiting", "zset"),
    ("delayed", "zset"),
    ("expiry", "zset"),
    ("stats", "hash"),
    ("arrivals", "zset"),
    ("arrived", "hash"),
    ("control", "stream"),
    ("cancels", "hash"),
]


async def cancel_targets(env: Env) -> dict[str, str]:
    """A job of each state the cancel script writes differently."""
    running = (await env.running()).job_id
    delayed = await env.due_retry()
    return {"queued": await env.queued(), "delayed": delayed, "running": running}


@pytest.mark.parametrize(("role", "kind"), wrong_types(*CANCEL_SHARED))
async def test_cancel_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    """Every shared key is checked first, whatever the jobs' states: one call over a job
    of each state."""
    targets = list((await cancel_targets(env)).values())
    await env.plant(key_of(role), kind)
    await refused(env, lambda: cancel_jobs(env.queue.connection, "dining", targets), key_of(role))


@pytest.mark.parametrize(("role", "kind"), wrong_types(("job", "hash"), ("result", "string")))
async def test_cancel_refuses_a_job_key_of_another_type(env: Env, role: str, kind: str) -> None:
    """An id with no waiting job: its job key, then its result key, is read."""
    await env.queued()
    if role == "result":
        await env.raw.delete(DINING.job("gone"))
    await env.plant(key_of(role, "gone"), kind)
    await refused(env, lambda: env.queue.cancel("dining", "gone"), key_of(role, "gone"))


@pytest.mark.parametrize(("role", "kind"), wrong_types(("queued", "hash"), ("expiry", "zset")))
async def test_cancel_session_refuses_a_queue_key_of_another_type(
    env: Env, role: str, kind: str
) -> None:
    """The session scan's keys (read only): refused before anything is cancelled."""
    await env.queued()
    await env.plant(key_of(role), kind)
    await refused(env, lambda: env.queue.cancel_session("0b7e6f4a-session"), key_of(role))


async def test_cancel_session_skips_a_job_key_of_another_type(env: Env) -> None:
    """A job of the expiry set whose key is not a hash has no payload to read: skipped
    (the cancel, which would refuse it, is not sent for it)."""
    job_id = await env.due_retry()
    await env.plant(DINING.job(job_id), "string")
    assert await env.queue.cancel_session("0b7e6f4a-session") == []


async def test_cancel_refuses_a_job_whose_state_is_unknown(env: Env) -> None:
    await env.queued()
    await env.raw.hset(DINING.job("odd"), mapping={"state": "exploded", "expires_at": "1"})
    refusal = await refused(env, lambda: env.queue.cancel("dining", "odd"), DINING.job("odd"))
    assert "unknown" in refusal.problem


@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
async def test_cancel_refuses_a_malformed_cancelled_counter(env: Env, value: str) -> None:
    """Checked by every script that ends a job cancelled, before its first write."""
    targets = await cancel_targets(env)
    await env.raw.hset(DINING.stats, "cancelled", value)
    for waiting in ("queued", "delayed"):
        job_id = targets[waiting]
        await refused(env, lambda job_id=job_id: env.queue.cancel("dining", job_id), DINING.stats)
    running = targets["running"]
    await env.queue.cancel("dining", running)  # a request bumps no counter: accepted
    await refused(env, lambda: env.leases.complete(running, TOKEN, "1"), DINING.stats)
    await refused(env, lambda: env.leases.fail(running, TOKEN, "boom"), DINING.stats)


@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
async def test_cancel_refuses_an_arrival_count_that_is_not_an_integer(env: Env, value: str) -> None:
    job_id = await env.queued()
    enqueued_at = int((await env.raw.hget(DINING.queued, job_id)).split(",", 1)[0])
    second = str(enqueued_at - enqueued_at % ARRIVAL_BUCKET_MS)
    await env.raw.hset(DINING.arrived, second, value)
    await refused(env, lambda: env.queue.cancel("dining", job_id), DINING.arrived)


async def test_cancel_of_a_packed_job_that_does_not_parse_still_cancels_it(env: Env) -> None:
    job_id = await env.queued()
    await env.raw.hset(DINING.queued, job_id, "garbage")
    report = await env.queue.cancel("dining", job_id)
    assert report.outcome == "cancelled"
    assert await env.raw.ttl(DINING.result(job_id)) > 3600  # kept for the fallback
    assert not await env.raw.hexists(DINING.queued, job_id)


# -- queue_claim: AttemptCalls.claim -----------------------------------------------------------
CLAIM_SHARED = [
    ("processing", "list"),
    ("leases", "zset"),
    ("stats", "hash"),
    ("expiry", "zset"),
    ("queue", "list"),
    ("waiting", "zset"),
    ("queued", "hash"),
    ("arrivals", "zset"),
    ("arrived", "hash"),
    ("paused", "string"),
    ("limits", "hash"),  # read with jobs to start, before the take (queue/limits.py)
]


async def taken(env: Env, count: int = 1, *, past_ttl: bool = False) -> list[str]:
    """Jobs moved into processing as a worker's BLMOVE leaves them, not yet claimed (still
    packed in `queued`); `past_ttl`: their TTL has passed (the claim expires them instead
    of starting them)."""
    ids = [await env.queued() for _ in range(count)]
    for job_id in ids:
        assert await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    if past_ttl:
        await make_packed_due(env.raw, DINING, ids)
    return ids


@pytest.mark.parametrize("past_ttl", [False, True], ids=["start", "expire"])
@pytest.mark.parametrize(("role", "kind"), wrong_types(*CLAIM_SHARED))
async def test_claim_refuses_a_queue_key_of_another_type(
    env: Env, role: str, kind: str, past_ttl: bool
) -> None:
    ids = await taken(env, 2, past_ttl=past_ttl)
    await env.plant(key_of(role), kind)
    tokens = [(job_id, f"token-{job_id}") for job_id in ids]
    await refused(env, lambda: env.leases.claim("worker-1", tokens), key_of(role))


@pytest.mark.parametrize("field", ["started", "expired"])
@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
async def test_claim_refuses_a_malformed_counter(env: Env, field: str, value: str) -> None:
    """Both counters are checked on every claim: which one it bumps is known only
    after reading every job, and the check must come before the first write."""
    (job_id,) = await taken(env)
    await env.raw.hset(DINING.stats, field, value)
    await refused(env, lambda: env.leases.claim("worker-1", [(job_id, TOKEN)]), DINING.stats)


@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL + ["01"])
async def test_claim_refuses_an_arrival_count_that_is_not_an_integer(env: Env, value: str) -> None:
    """The count of a taken job's arrival second, which the claim lowers."""
    (job_id,) = await taken(env)
    enqueued_at = int((await env.raw.hget(DINING.queued, job_id)).split(",", 1)[0])
    second = enqueued_at - enqueued_at % ARRIVAL_BUCKET_MS
    assert await env.raw.hget(DINING.arrived, str(second)) == "1"
    await env.raw.hset(DINING.arrived, str(second), value)
    await refused(env, lambda: env.leases.claim("worker-1", [(job_id, TOKEN)]), DINING.arrived)


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_claim_refuses_a_job_key_of_another_type_before_claiming_any(
    env: Env, kind: str
) -> None:
    healthy, broken = await taken(env, 2)
    await env.plant(DINING.job(broken), kind)
    tokens = [(healthy, "token-a"), (broken, "token-b")]
    await refused(env, lambda: env.leases.claim("worker-1", tokens), DINING.job(broken))


@pytest.mark.parametrize("past_ttl", [False, True], ids=["start", "expire"])
@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_claim_with_a_result_key_of_any_type(env: Env, kind: str, past_ttl: bool) -> None:
    (job_id,) = await taken(env, past_ttl=past_ttl)
    await env.plant(DINING.result(job_id), kind)
    _, claims = await env.leases.claim("worker-1", [(job_id, TOKEN)])
    if past_ttl:
        assert claims == []
        outcome = await env.queue.get_result(job_id, "dining")
        assert outcome is not None and outcome.status == "expired"
        assert (await env.counter("expired"), await env.counter("started")) == ("1", None)
    else:
        assert [claim.job_id for claim in claims] == [job_id]
        assert await env.raw.hmget(DINING.job(job_id), ["state", "token"]) == ["running", TOKEN]
        assert await env.counter("started") == "1"
    assert await env.raw.zscore(DINING.waiting, job_id) is None
    assert await env.raw.hget(DINING.queued, job_id) is None
    assert not await env.raw.exists(DINING.arrived, DINING.arrivals)


# A packed value (queue/envelope.py) that does not parse, built from the real one's
# enqueued_at (ENQ) and the problem the claim names.
MALFORMED_PACKED: dict[str, tuple[str | bytes, str]] = {
    "expires_at garbage": ("ENQ,soon,60,3,n\n\n{}", "stored packed job does not parse"),
    "header lines missing": ("ENQ,1,60,3,n {}", "stored packed job does not parse"),
    "a header field missing": ("ENQ,1,60,n\n\n{}", "stored packed job does not parse"),
    "ttl zero": ("ENQ,99999999999,0,3,n\n\n{}", "holds an out-of-range number"),
    "max_attempts zero": ("ENQ,99999999999,60,0,n\n\n{}", "holds an out-of-range number"),
    "expires_at of 16 digits": ("ENQ," + "9" * 16 + ",60,3,n\n\n{}", "out-of-range number"),
    # (past its TTL: expired, it would go to SET EX as stored, which refuses "060" after
    # the other job's writes)
    "ttl with a leading zero": ("ENQ,99999999999,060,3,n\n\n{}", "number with a leading zero"),
    # (an expires_at still ahead: the claim expires a job past its TTL unread, and only
    # the worker, decoding the payload of a job it runs, finds it is not UTF-8)
    "payload not UTF-8": (b"ENQ," + b"9" * 15 + b",60,3,n\n\n\xff\xfe{", "not valid UTF-8"),
}


@pytest.mark.parametrize("fault", sorted(MALFORMED_PACKED))
async def test_claim_holds_a_malformed_packed_job_as_corrupt_and_it_is_dead_lettered(
    env: Env, fault: str
) -> None:
    """Held as a run is (running, leased, counted started) with the problem, out of the
    queued hash and its arrival second, so the worker can dead-letter it naming it."""
    healthy, broken = await taken(env, 2)
    packed = await env.raw.hget(DINING.queued, broken)
    enqueued_at = packed.split(",", 1)[0]
    template, problem = MALFORMED_PACKED[fault]
    planted = (
        template.replace(b"ENQ", enqueued_at.encode())
        if isinstance(template, bytes)
        else template.replace("ENQ", enqueued_at)
    )
    await env.raw.hset(DINING.queued, broken, planted)  # type: ignore[arg-type]
    _, claims = await env.leases.claim("worker-1", [(healthy, "token-a"), (broken, TOKEN)])
    by_id = {claim.job_id: claim for claim in claims}
    assert sorted(by_id) == sorted([healthy, broken])
    assert by_id[healthy].problem is None
    assert problem in (by_id[broken].problem or ""), by_id[broken].problem
    assert await env.raw.hmget(DINING.job(broken), ["state", "token"]) == ["running", TOKEN]
    assert await env.raw.zscore(DINING.leases, broken) is not None
    assert await env.counter("started") == "2"
    assert await env.raw.hlen(DINING.queued) == 0
    assert not await env.raw.exists(DINING.arrived, DINING.arrivals)

    assert await env.leases.fail(broken, TOKEN, by_id[broken].problem or "", mode="corrupt") == (
        "dead"
    )
    assert await env.raw.lrange(DINING.dead, 0, -1) == [broken]
    outcome = await env.queue.get_result(broken, "dining")
    assert outcome is not None and outcome.status == "failed"
    assert problem in (outcome.error or "")


async def test_claim_of_two_entries_of_one_job_starts_it_once(env: Env) -> None:
    """The records are read before anything is written: a job taken twice in one call
    (a stray second entry) must still be started once, its second entry dropped."""
    job_id = await env.queued()
    await env.raw.rpush(DINING.queue, job_id)
    for _ in range(2):
        assert await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    _, claims = await env.leases.claim("worker-1", [(job_id, "token-a"), (job_id, "token-b")])
    assert [(claim.job_id, claim.token, claim.attempt) for claim in claims] == [
        (job_id, "token-a", 1)
    ]
    assert await env.raw.lrange(DINING.processing, 0, -1) == [job_id]
    assert await env.raw.hmget(DINING.job(job_id), ["token", "attempts"]) == ["token-a", "1"]
    assert await env.counter("started") == "1"


async def test_claim_after_a_refusal_claims_every_job(env: Env) -> None:
    ids = await taken(env, 3)
    await env.raw.hset(DINING.stats, "started", "many")
    tokens = [(job_id, f"token-{job_id}") for job_id in ids]
    with pytest.raises(CorruptQueueState):
        await env.leases.claim("worker-1", tokens)
    await env.raw.hdel(DINING.stats, "started")
    _, claims = await env.leases.claim("worker-1", tokens)
    assert [claim.job_id for claim in claims] == ids
    assert await env.counter("started") == "3"
    assert await env.raw.zcard(DINING.leases) == 3
    assert await env.raw.zcard(DINING.waiting) == 0
    assert await env.raw.hlen(DINING.queued) == 0
    assert not await env.raw.exists(DINING.arrived, DINING.arrivals)
    for job_id in ids:
        assert await env.raw.hmget(DINING.job(job_id), ["state", "attempts"]) == ["running", "1"]


# -- queue_fail: AttemptCalls.fail -------------------------------------------------------------
FAIL_KEYS = wrong_types(
    ("processing", "list"),
    ("leases", "zset"),
    ("delayed", "zset"),
    ("dead", "list"),
    ("queue", "list"),
    ("failed", "list"),
    ("expiry", "zset"),
    ("stats", "hash"),
    ("waiting", "zset"),
    ("job", "hash"),
    ("cancels", "hash"),
)


@pytest.mark.parametrize("mode", ["error", "release"])  # checked before any mode path
@pytest.mark.parametrize(("role", "kind"), FAIL_KEYS)
async def test_fail_refuses_a_key_of_another_type(
    env: Env, role: str, kind: str, mode: str
) -> None:
    claim = await env.running()
    key = key_of(role, claim.job_id)
    await env.plant(key, kind)
    await refused(env, lambda: env.leases.fail(claim.job_id, TOKEN, "boom", mode=mode), key)


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
async def test_fail_of_the_last_attempt_replaces_a_result_key_of_any_type(
    env: Env, kind: str
) -> None:
    claim = await env.running()
    await env.plant(DINING.result(claim.job_id), kind)
    assert await env.leases.fail(claim.job_id, TOKEN, "boom", mode="corrupt") == "dead"
    outcome = await env.queue.get_result(claim.job_id, "dining")
    assert outcome is not None and (outcome.status, outcome.error) == ("failed", "boom")
    assert await env.raw.zscore(DINING.leases, claim.job_id) is None
    assert await env.raw.lrange(DINING.dead, 0, -1) == [claim.job_id]


@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
@pytest.mark.parametrize(
    ("mode", "field"), [("error", "retried"), ("corrupt", "dead_lettered"), ("fatal", "failed")]
)
async def test_fail_refuses_a_malformed_counter(
    env: Env, mode: str, field: str, value: str
) -> None:
    claim = await env.running()
    await env.raw.hset(DINING.stats, field, value)
    await refused(
        env, lambda: env.leases.fail(claim.job_id, TOKEN, "boom", mode=mode), DINING.stats
    )
    assert str(await env.counter(field)) == value


@pytest.mark.parametrize("attempts", ["007", "-0"])
async def test_a_release_of_a_job_whose_attempts_read_with_a_leading_zero_gives_it_back(
    env: Env, attempts: str
) -> None:
    """A release gives the attempt back: written as the parsed value less one, since
    HINCRBY would refuse the stored text after the lease was dropped."""
    claim = await env.running()
    await env.raw.hset(DINING.job(claim.job_id), "attempts", attempts)
    assert await env.leases.fail(claim.job_id, TOKEN, "stopping", mode="release") == "released"
    assert await env.raw.hmget(DINING.job(claim.job_id), ["state", "attempts", "token"]) == [
        "queued", str(int(attempts) - 1), None,
    ]  # fmt: skip
    assert await env.raw.lrange(DINING.queue, 0, -1) == [claim.job_id]
    assert await env.raw.zscore(DINING.leases, claim.job_id) is None
    assert await env.raw.lrange(DINING.processing, 0, -1) == []


async def test_the_reaper_refuses_a_lapsed_lease_of_a_job_key_of_another_type(env: Env) -> None:
    """Mode "lost" (the reaper): the lease lapsed; a job key of another type is refused
    whole, the lease stays for a later run."""
    claim = await env.running()
    await env.raw.zadd(DINING.leases, {claim.job_id: 1})  # lapsed
    await env.plant(DINING.job(claim.job_id), "string")
    await refused(env, env.chores.reap, DINING.job(claim.job_id))


# -- queue_complete's wait and run histograms, queue_fail's error classes ------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [("started_at", "later"), ("started_at", None), ("due_at", "1.7e12"), ("due_at", "soon"),
     ("run_at", "soon"), ("run_at", "1.7e12")],
    ids=repr,
)  # fmt: skip
async def test_complete_refuses_a_timing_field_that_does_not_parse(
    env: Env, field: str, value: str | None
) -> None:
    claim = await env.running()
    job_key = DINING.job(claim.job_id)
    if value is None:
        await env.raw.hdel(job_key, field)
    else:
        await env.raw.hset(job_key, field, value)
    await refused(env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), job_key)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("wait_count", "many"),
        ("run_count", "1.5"),
        ("wait_le:+Inf", "x"),
        ("run_le:+Inf", "9223372036854775807"),
        ("wait_sum", "nan"),
        ("run_sum", "slow"),
    ],
    ids=repr,
)
async def test_complete_refuses_a_wait_or_run_field_that_does_not_parse(
    env: Env, field: str, value: str
) -> None:
    claim = await env.running()
    if "_le:" in field:  # whichever bucket the observation lands in
        histogram = field.split("_le:")[0]
        for bound in env.queue.settings.latency_buckets:
            await env.raw.hset(DINING.stats, f"{histogram}_le:{bound:g}", value)
    await env.raw.hset(DINING.stats, field, value)
    await refused(env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), DINING.stats)


# -- queue_complete's exemplars: the job's stored trace_context, read, never refused -------
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
NO_EXEMPLAR = {
    "not JSON": "traceparent 00-" + TRACE_ID,
    "empty": "",
    "spaced JSON": '{"traceparent": "' + TRACEPARENT + '"}',
    "upper-case id": '{"traceparent":"' + TRACEPARENT.upper() + '"}',
    "all-zero id": '{"traceparent":"00-' + "0" * 32 + '-00f067aa0ba902b7-01"}',
    "short id": '{"traceparent":"00-' + TRACE_ID[1:] + '-00f067aa0ba902b7-01"}',
    "long id": '{"traceparent":"00-' + TRACE_ID + 'a-00f067aa0ba902b7-01"}',
    "inside a value": '{"x":"\\"traceparent\\":\\"' + TRACEPARENT + '"}',
    "unicode id": '{"traceparent":"00-' + "é" * 16 + '-00f067aa0ba902b7-01"}',
    "batch job": '{"traceparent":"' + TRACEPARENT + '","relation":"link"}',
    "over the read limit": '{"traceparent":"' + TRACEPARENT + '","x":"' + "y" * 16384 + '"}',
}


async def exemplars(env: Env) -> dict[str, str]:
    stats: dict[str, str] = await env.raw.hgetall(DINING.stats)
    return {field: value for field, value in stats.items() if "_ex:" in field}


async def test_complete_writes_an_exemplar_per_histogram_from_the_trace_context(env: Env) -> None:
    """Beside the bucket each histogram counted the job in: its trace id, its value and
    the completion's time. A field there already is overwritten, never read."""
    claim = await env.running()
    job_key = DINING.job(claim.job_id)
    await env.raw.hset(job_key, "trace_context", '{"traceparent":"' + TRACEPARENT + '"}')
    bounds = [*env.queue.settings.latency_buckets, float("inf")]
    planted = {
        histogram_exemplar_field(h, b): "x" for h in ("latency", "wait", "run") for b in bounds
    }
    await env.raw.hset(DINING.stats, mapping=planted)
    await env.leases.complete(claim.job_id, TOKEN, "1")
    stats: dict[str, str] = await env.raw.hgetall(DINING.stats)
    finished_at = await env.raw.hget(job_key, "finished_at")
    for histogram in ("latency", "wait", "run"):
        written = {f: v for f, v in stats.items() if f.startswith(f"{histogram}_ex:") and v != "x"}
        [(field, value)] = written.items()
        assert stats[field.replace("_ex:", "_le:")] == "1"
        trace_id, seconds, millis = value.split(" ")
        assert (trace_id, float(seconds), millis) == (
            TRACE_ID,
            float(stats[f"{histogram}_sum"]),
            finished_at,
        )
    assert len([f for f in stats if "_ex:" in f]) == len(planted)


@pytest.mark.parametrize("stored", list(NO_EXEMPLAR.values()), ids=list(NO_EXEMPLAR))
async def test_complete_writes_no_exemplar_from_a_trace_context_without_one(
    env: Env, stored: str
) -> None:
    claim = await env.running()
    await env.raw.hset(DINING.job(claim.job_id), "trace_context", stored)
    await env.leases.complete(claim.job_id, TOKEN, "1")
    assert await env.raw.hget(DINING.job(claim.job_id), "state") == "succeeded"
    assert await env.counter("completed") == "1"
    assert await exemplars(env) == {}


async def test_complete_refused_writes_no_exemplar(env: Env) -> None:
    claim = await env.running()
    await env.raw.hset(
        DINING.job(claim.job_id), "trace_context", '{"traceparent":"' + TRACEPARENT + '"}'
    )
    await env.raw.hset(DINING.stats, "run_sum", "slow")
    await refused(env, lambda: env.leases.complete(claim.job_id, TOKEN, "1"), DINING.stats)


async def test_completions_in_one_call_keep_one_exemplar_per_bucket(env: Env) -> None:
    first, second = await env.running(), await env.running()
    for claim, trace_id in ((first, TRACE_ID), (second, TRACE_ID[::-1])):
        parent = f'{{"traceparent":"00-{trace_id}-00f067aa0ba902b7-01"}}'
        await env.raw.hset(DINING.job(claim.job_id), "trace_context", parent)
    await asyncio.gather(
        *(env.leases.complete(claim.job_id, TOKEN, "1") for claim in (first, second))
    )
    written = await exemplars(env)
    counted = [f for f, v in (await env.raw.hgetall(DINING.stats)).items() if "_le:" in f]
    assert {f.replace("_ex:", "_le:") for f in written} <= set(counted)
    assert {v.split(" ")[0] for v in written.values()} <= {TRACE_ID, TRACE_ID[::-1]}
    assert {f.split("_ex:")[0] for f in written} == {"latency", "wait", "run"}


@pytest.mark.parametrize("field", ["error:ValueError", "error_classes"])
@pytest.mark.parametrize("value", NOT_INTEGERS + NOT_CANONICAL)
async def test_fail_refuses_a_malformed_error_class_counter(
    env: Env, field: str, value: str
) -> None:
    claim = await env.running()
    await env.raw.hset(DINING.stats, field, value)
    fail = lambda: env.leases.fail(claim.job_id, TOKEN, "ValueError: bad input")  # noqa: E731
    await refused(env, fail, DINING.stats)


async def test_fail_at_the_class_cap_refuses_a_malformed_other_counter(env: Env) -> None:
    claim = await env.running()
    await env.raw.hset(DINING.stats, mapping={"error_classes": "20", "error:other": "many"})
    fail = lambda: env.leases.fail(claim.job_id, TOKEN, "KeyError: 'x'")  # noqa: E731
    await refused(env, fail, DINING.stats)
