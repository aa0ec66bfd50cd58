"""Scheduled jobs (enqueue with delay= or run_at=, enqueue_many too): a job waits in the
delayed set with its job hash, counts as delayed (not as queued), is promoted once due
and runs then; a schedule at or after the job's own expiry is refused, nothing written;
a scheduled job's latency counts from its due time. Runs on a single node and on the
cluster."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS
from platform_common.jobs.queue import JobPayload, current_job
from platform_common.jobs.worker import Chores
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, Env
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

pytestmark = faults.FAULT_QUEUE  # the `env` of tests/queue/conftest.py, as the fault tests make it
"""The fault tests' fixture: a queue, its AttemptCalls, chores and raw clients."""


async def redis_ms(env: Env) -> int:
    seconds, micros = await env.raw.time()
    return int(seconds) * 1000 + int(micros) // 1000


# -- where a scheduled job waits ---------------------------------------------------------
async def test_a_delayed_job_waits_in_the_delayed_set_with_its_job_hash(env: Env) -> None:
    before = await redis_ms(env)
    job_id = await env.queue.enqueue(make_job(), delay=30)
    after = await redis_ms(env)
    due = await env.raw.zscore(DINING.delayed, job_id)
    assert due is not None and before + 30_000 <= due <= after + 30_000
    fields = await env.raw.hgetall(DINING.job(job_id))
    assert fields["run_at"] == str(int(due))
    assert "state" not in fields  # a queued job's hash: the claim runs it once promoted
    assert await env.raw.zscore(DINING.expiry, job_id) == int(fields["expires_at"])
    assert not await env.raw.hexists(DINING.queued, job_id)
    assert not await env.raw.exists(DINING.queue, DINING.waiting, DINING.arrivals)
    stats = await env.queue.stats("dining")
    assert (stats.queued, stats.delayed, stats.counters["enqueued"]) == (0, 1, 1)


@pytest.mark.parametrize(
    "schedule",
    [{"delay": timedelta(seconds=45)}, {"delay": 45.5}, {"run_at": "in 45 s"}],
    ids=["timedelta", "float", "run_at"],
)
async def test_every_form_of_schedule_sets_the_due_time(env: Env, schedule: dict[str, Any]) -> None:
    now = await redis_ms(env)
    if "run_at" in schedule:
        at = datetime.now(UTC) + timedelta(seconds=45)
        schedule = {"run_at": at}
        expected = int(at.timestamp() * 1000)
    else:
        expected = now + 45_000
    job_id = await env.queue.enqueue(make_job(), **schedule)
    due = await env.raw.zscore(DINING.delayed, job_id)
    assert abs(due - expected) < 5_000


async def test_enqueue_many_schedules_every_job_of_the_batch(env: Env) -> None:
    at = datetime.now(UTC) + timedelta(seconds=40)
    ids = await env.queue.enqueue_many([make_job() for _ in range(3)], run_at=at)
    due = int(at.timestamp() * 1000)
    assert await env.raw.zrange(DINING.delayed, 0, -1, withscores=True) == [
        (job_id, due) for job_id in sorted(ids)
    ]
    more = await env.queue.enqueue_many([make_job() for _ in range(600)], delay=20)
    assert await env.raw.zcard(DINING.delayed) == 603  # two chunks of the batch
    assert (await env.queue.stats("dining")).delayed == 603
    assert len(set(more)) == 600


# -- refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("schedule", "field", "problem"),
    [
        ({"delay": -1}, "delay", "must be from 0"),
        ({"delay": float("nan")}, "delay", "must be from 0"),
        ({"delay": float("inf")}, "delay", "must be from 0"),
        ({"delay": 10**12}, "delay", "must be from 0"),
        ({"delay": True}, "delay", "must be seconds"),
        ({"delay": "60"}, "delay", "must be seconds"),
        ({"delay": timedelta(seconds=-5)}, "delay", "must be from 0"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at", "must be an aware datetime"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at", "must be a datetime"),
        ({"run_at": 1_900_000_000}, "run_at", "must be a datetime"),
        ({"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "run_at", "not both"),
    ],
)
async def test_a_schedule_that_is_not_one_is_refused(
    env: Env, schedule: dict[str, Any], field: str, problem: str
) -> None:
    before = await env.snapshot()
    for call in (
        lambda: env.queue.enqueue(make_job(), **schedule),
        lambda: env.queue.enqueue_many([make_job()], **schedule),
    ):
        with pytest.raises(InvalidPayload) as info:
            await call()
        assert problem in info.value.errors[field]
    assert await env.snapshot() == before


async def test_a_run_at_at_or_after_the_jobs_expiry_is_refused(env: Env) -> None:
    created = datetime.now(UTC).replace(microsecond=0)
    job = make_job(created_at=created.isoformat(), ttl_seconds=60)
    before = await env.snapshot()
    for at in (created + timedelta(seconds=60), created + timedelta(days=3)):
        with pytest.raises(InvalidPayload) as info:
            await env.queue.enqueue(job, run_at=at)
        assert "it would expire unrun" in info.value.errors["run_at"]
        assert "created_at + ttl_seconds" in info.value.errors["run_at"]
    fine = make_job(created_at=created.isoformat(), ttl_seconds=600)
    with pytest.raises(InvalidPayload) as batch:
        await env.queue.enqueue_many([fine, job], run_at=created + timedelta(seconds=90))
    assert list(batch.value.errors) == ["jobs[1].run_at"]
    assert await env.snapshot() == before


async def test_a_delay_past_the_jobs_expiry_is_refused_by_redis_clock(env: Env) -> None:
    before = await env.snapshot()
    with pytest.raises(InvalidPayload) as info:
        await env.queue.enqueue(make_job(ttl_seconds=60), delay=61)
    assert "it would expire unrun" in info.value.errors["delay"]
    long_lived = [make_job(ttl_seconds=600) for _ in range(3)]
    with pytest.raises(InvalidPayload) as batch:
        await env.queue.enqueue_many([*long_lived, make_job(ttl_seconds=60)], delay=120)
    assert "it would expire unrun" in batch.value.errors["jobs[3].delay"]
    assert "not written" in batch.value.errors["jobs[0].delay"]
    assert await env.snapshot() == before


async def test_a_scheduled_jobs_id_is_taken(env: Env) -> None:
    job = make_job()
    await env.queue.enqueue(job, delay=30)
    schedules: list[dict[str, Any]] = [{}, {"delay": 30}]
    for schedule in schedules:
        with pytest.raises(InvalidPayload, match="already exists"):
            await env.queue.enqueue(job, **schedule)
    with pytest.raises(InvalidPayload, match="already exists"):
        await env.queue.enqueue_many([job], delay=30)
    assert await env.raw.zcard(DINING.delayed) == 1


# -- promotion, running, expiry ----------------------------------------------------------
async def test_a_due_scheduled_job_is_promoted_and_claimed(env: Env) -> None:
    job_id = await env.queue.enqueue(make_job(), delay=0)
    assert await env.chores.promote() == 1
    assert await env.raw.lrange(DINING.queue, 0, -1) == [job_id]
    assert await env.raw.zscore(DINING.waiting, job_id) is not None
    stats = await env.queue.stats("dining")
    assert (stats.queued, stats.delayed) == (1, 0)
    _, claims = await env.leases.take("worker-1", ["t-0"])
    assert [(claim.job_id, claim.attempt) for claim in claims] == [(job_id, 1)]
    assert not await env.raw.exists(DINING.waiting)


async def test_a_job_not_due_is_not_promoted(env: Env) -> None:
    await env.queue.enqueue(make_job(), delay=50)
    assert await env.chores.promote() == 0
    assert not await env.raw.exists(DINING.queue)


async def test_a_worker_runs_a_scheduled_job_once_due_and_times_it_from_then(
    redis_url: str, env: Env
) -> None:
    started: dict[str, int] = {}

    async def handler(job: JobPayload) -> str:
        started[current_job().job_id] = await redis_ms(env)
        return "on time"

    job_id = await env.queue.enqueue(make_job(), delay=1.5)
    due = int(await env.raw.zscore(DINING.delayed, job_id))
    async with running_worker(fast_settings(redis_url), handler):
        result = await eventually(lambda: env.queue.get_result(job_id, "dining"))
    assert result.ok and result.result == "on time"
    assert started[job_id] >= due
    stats = await env.raw.hgetall(DINING.stats)
    # Latency from the due time: well under the 1.5 s the job waited for it.
    assert float(stats["latency_sum"]) < 1.5 and stats["latency_count"] == "1"


async def test_a_scheduled_job_that_expires_leaves_the_delayed_set(env: Env) -> None:
    job_id = await env.queue.enqueue(make_job(ttl_seconds=60), delay=30)
    past = await redis_ms(env) - 1000
    await env.raw.hset(DINING.job(job_id), "expires_at", str(past))
    await env.raw.zadd(DINING.expiry, {job_id: past})
    assert await env.queue.cleanup("dining") == [job_id]
    assert not await env.raw.exists(DINING.delayed, DINING.job(job_id))
    result = await env.queue.get_result(job_id, "dining")
    assert result is not None and result.status == "expired"
    assert (await env.queue.stats("dining")).counters["expired"] == 1


async def test_promotion_reads_only_the_due_jobs(env: Env) -> None:
    """The promoter's cost grows with the jobs due, not with the jobs delayed:
    ZRANGEBYSCORE with a limit. (bench.schedule measures it at 100,000 delayed.)"""
    await env.queue.enqueue_many([make_job(ttl_seconds=3600) for _ in range(50)], delay=600)
    due = await env.queue.enqueue(make_job(), delay=0)
    assert await env.chores.promote() == 1
    assert await env.raw.lrange(DINING.queue, 0, -1) == [due]
    assert await env.raw.zcard(DINING.delayed) == 50


async def test_the_chores_of_a_worker_promote_it(redis_url: str, env: Env) -> None:
    ran: list[str] = []

    async def handler(job: JobPayload) -> None:
        ran.append(current_job().job_id)

    ids = await env.queue.enqueue_many([make_job() for _ in range(3)], delay=0.2)
    async with running_worker(fast_settings(redis_url), handler):
        await eventually(lambda: asyncio.sleep(0, len(ran) == 3))
    assert sorted(ran) == sorted(ids)
    assert await Chores(env.queue.connection, "dining").promote() == 0


async def test_a_requeued_dead_letter_is_no_longer_scheduled(env: Env) -> None:
    """A dead letter requeued runs now, its latency counted from the requeue."""
    job_id = await env.queue.enqueue(make_job(), delay=0)
    assert await env.chores.promote() == 1
    (claim,) = (await env.leases.take("worker-1", ["t-0"]))[1]
    await env.leases.fail(claim.job_id, "t-0", "boom", mode="corrupt")
    assert await env.raw.hget(DINING.job(job_id), "run_at") is not None
    assert await env.queue.dead_letters.requeue("dining", [job_id]) == [job_id]
    assert await env.raw.hget(DINING.job(job_id), "run_at") is None
    assert await env.raw.lrange(DINING.queue, 0, -1) == [job_id]
    record = await env.queue.get_record("dining", job_id)
    assert record is not None and record.status == "pending"


async def test_a_scheduled_enqueue_sent_again_is_recognised_as_its_own(env: Env) -> None:
    """A call retried after a lost reply (same nonce): answered "ok", nothing written twice."""
    keys = DINING
    job = make_job()
    created = int(datetime.fromisoformat(job["created_at"]).timestamp() * 1000)
    call_keys = [
        keys.queue, keys.stats, keys.queued, keys.expiring, keys.arrivals, keys.arrived,
        keys.deadline_mark, keys.job(job["job_id"]), keys.result(job["job_id"]),
        keys.expiring_bucket(created + 60_000), keys.delayed, keys.expiry,
    ]  # fmt: skip
    args: list[Any] = [
        "nonce-1", 1, created - 300_000, created + 60_000, EXPIRY_BUCKET_MS, ARRIVAL_BUCKET_MS,
        job["job_id"], '{"task": "x"}', 60, created, 3, "", "+20000",
    ]  # fmt: skip
    connection = env.queue.connection
    assert await connection.run_script(connection.scripts.enqueue, call_keys, args) == ["ok", 1]
    before = await env.snapshot()
    assert await connection.run_script(connection.scripts.enqueue, call_keys, args) == ["ok", 0]
    assert await env.snapshot() == before
    args[0] = "nonce-2"  # another call: a duplicate
    reply = await connection.run_script(connection.scripts.enqueue, call_keys, args)
    assert reply == ["duplicate", job["job_id"]]
