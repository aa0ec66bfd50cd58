"""A Worker in this process against a real Redis: success, retries with backoff, failures,
dead letters, TTL expiry, fencing, lease renewal and graceful shutdown."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from platform_common.jobs.errors import LeaseLost
from platform_common.jobs.keys import STATS_COUNTERS, QueueKeys, latency_bucket_field
from platform_common.jobs.queue import (
    JobPayload,
    JobQueue,
    NonRetryableError,
    QueueConnection,
    current_job,
)
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker

DINING = QueueKeys("dining")
# Waits on a lease or a TTL of one type, whose scripts run on its one slot alike on a
# cluster; the worker's round trips on a cluster are the other tests here.
ONE_SLOT = "a lease or a TTL running out: one type's scripts on its one slot"


async def counters(queue: JobQueue) -> dict[str, int]:
    return (await queue.stats("dining")).counters


async def history(client: RedisClient, job_id: str) -> list[dict[str, Any]]:
    return list(json.loads(await client.hget(DINING.job(job_id), "history") or "[]"))


async def echo(job: JobPayload) -> dict[str, Any]:
    return {"task": job.task, "attempt": current_job().attempt}


@pytest.mark.valkey  # one worker end to end on the second server family
async def test_success_stores_result_then_publishes_and_counts(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job = make_job()
    events = queue.completions(watch=[("dining", job["job_id"])])
    await queue.enqueue(job)
    async with running_worker(queue.settings, echo):
        completion = await asyncio.wait_for(anext(events), 20)
    await events.aclose()
    assert completion.job_id == job["job_id"]
    assert completion.result is not None and completion.result.ok
    assert completion.result.result == {"task": job["task"], "attempt": 1}
    stats = await queue.stats("dining")
    assert (stats.queued, stats.in_progress, stats.delayed, stats.dead) == (0, 0, 0, 0)
    assert stats.counters == {
        **dict.fromkeys(STATS_COUNTERS, 0), "enqueued": 1, "started": 1, "completed": 1,
        "latency_count": 1,
    }  # fmt: skip
    raw = await redis_client.hgetall(DINING.stats)
    buckets = {k: int(v) for k, v in raw.items() if k.startswith("latency_le:")}
    assert sum(buckets.values()) == 1
    assert 0 <= float(raw["latency_sum"]) < 20
    assert await redis_client.ttl(DINING.result(job["job_id"])) > 0
    assert await redis_client.ttl(DINING.job(job["job_id"])) > 0
    assert await redis_client.zcard(DINING.leases) == 0
    assert await redis_client.zcard(DINING.expiry) == 0
    record = await queue.get_record("dining", job["job_id"])
    assert record is not None and record.status == "succeeded"


async def test_retries_follow_the_backoff_then_succeed(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    async def third_time_lucky(job: JobPayload) -> str:
        if current_job().attempt < 3:
            raise RuntimeError(f"attempt {current_job().attempt} failed")
        return "done"

    job = make_job()
    await queue.enqueue(job)
    async with running_worker(queue.settings, third_time_lucky):
        result = await eventually(lambda: queue.get_result(job["job_id"]))
    assert result.ok and result.result == "done"
    entries = await history(redis_client, job["job_id"])
    assert [e["attempt"] for e in entries] == [1, 2]
    assert [e["retry_at"] - e["ended_at"] for e in entries] == [200, 400]  # 0.2 s, x2
    assert entries[0]["error"] == "RuntimeError: attempt 1 failed"
    third_start = int(await redis_client.hget(DINING.job(job["job_id"]), "started_at"))
    assert entries[0]["retry_at"] <= entries[1]["started_at"]
    assert entries[1]["retry_at"] <= third_start
    counts = await counters(queue)
    assert (counts["started"], counts["retried"], counts["completed"], counts["failed"]) == (
        3, 2, 1, 0,
    )  # fmt: skip


async def test_last_failure_dead_letters_with_history(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    async def always_fails(job: JobPayload) -> None:
        raise ValueError("bad input from upstream")

    job = make_job()
    await queue.enqueue(job)
    async with running_worker(queue.settings, always_fails):
        result = await eventually(lambda: queue.get_result(job["job_id"]))
    assert result.status == "failed" and result.error == "ValueError: bad input from upstream"
    assert await redis_client.lrange(DINING.dead, 0, -1) == [job["job_id"]]
    letters = await queue.dead_letters.list("dining")
    assert [(d.job_id, d.attempts) for d in letters] == [(job["job_id"], 3)]
    assert [e["attempt"] for e in letters[0].history] == [1, 2, 3]
    assert "retry_at" not in letters[0].history[-1]
    counts = await counters(queue)
    assert (counts["failed"], counts["dead_lettered"], counts["retried"]) == (1, 1, 2)


async def test_non_retryable_and_unencodable_results_fail_at_once(queue: JobQueue) -> None:
    async def refuse(job: JobPayload) -> object:
        if job.task == "refuse":
            raise NonRetryableError("the task makes no sense")
        return {"when": datetime.now(UTC)}  # not JSON

    refused, unencodable = make_job(task="refuse"), make_job(task="unencodable")
    await queue.enqueue_many([refused, unencodable])
    async with running_worker(queue.settings, refuse):
        first = await eventually(lambda: queue.get_result(refused["job_id"]))
        second = await eventually(lambda: queue.get_result(unencodable["job_id"]))
    assert first.status == "failed" and "no sense" in (first.error or "")
    assert second.status == "failed" and "not JSON-serialisable" in (second.error or "")
    counts = await counters(queue)
    assert (counts["failed"], counts["dead_lettered"], counts["retried"]) == (2, 0, 0)


def nearly_expired(seconds_left: float, **overrides: Any) -> dict[str, Any]:
    created = datetime.now(UTC) - timedelta(seconds=60 - seconds_left)
    return make_job(created_at=created.isoformat(), ttl_seconds=60, **overrides)


async def test_cleanup_expires_a_waiting_job_without_starting_it(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job = nearly_expired(0.3)
    events = queue.completions(watch=[("dining", job["job_id"])])
    await queue.enqueue(job)
    assert await queue.cleanup("dining") == []  # not yet due
    expired = await eventually(lambda: queue.cleanup("dining"))
    assert expired == [job["job_id"]]
    assert await queue.cleanup("dining") == []  # counted once only
    completion = await asyncio.wait_for(anext(events), 10)
    await events.aclose()
    assert completion.result is not None and completion.result.status == "expired"
    assert not await redis_client.exists(DINING.job(job["job_id"]), DINING.expiry, DINING.waiting)
    # At the list's tail, its entry is trimmed off with it (one behind a job that still
    # waits would stay, and the worker that pops it drops it: test_expire_queued.py).
    assert await redis_client.lrange(DINING.queue, 0, -1) == []
    counts = await counters(queue)
    assert (counts["expired"], counts["started"], counts["failed"]) == (1, 0, 0)


@pytest.mark.single_node(ONE_SLOT)
async def test_a_worker_never_starts_an_expired_job_and_cancels_one_at_its_ttl(
    queue: JobQueue,
) -> None:
    started: list[str] = []

    async def slow(job: JobPayload) -> str:
        started.append(job.task)
        await asyncio.sleep(30)
        return "too late"

    stale = nearly_expired(0.2, task="stale")
    await queue.enqueue(stale)
    await asyncio.sleep(0.3)  # let its TTL pass while no worker runs: the point of the test
    running = nearly_expired(1.0, task="running")
    await queue.enqueue(running)
    async with running_worker(queue.settings.with_overrides(cleanup_interval=60), slow):
        for job in (stale, running):
            result = await eventually(partial(queue.get_result, job["job_id"]))
            assert result.status == "expired"
    assert started == ["running"]
    counts = await counters(queue)
    assert (counts["expired"], counts["started"], counts["completed"]) == (2, 1, 0)


@pytest.mark.single_node(ONE_SLOT)
async def test_a_lost_lease_fences_out_the_old_token(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    connection = await QueueConnection.open(queue.settings)
    try:
        await fence_scenario(queue, redis_client, connection)
    finally:
        await connection.aclose()


async def fence_scenario(
    queue: JobQueue, redis_client: RedisClient, connection: QueueConnection
) -> None:
    leases, chores = AttemptCalls(connection, "dining"), Chores(connection, "dining")

    async def reaped() -> int:
        return (await chores.reap()).retried

    job = make_job()
    await queue.enqueue(job)
    job_id = await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    _, claims = await leases.claim("paused-worker", [(job_id, "token-a")])
    assert [c.attempt for c in claims] == [1]
    # The worker stalls past its lease; the reaper counts the crash and retries the job.
    assert await eventually(reaped, within=10) == 1
    before = await redis_client.hgetall(DINING.job(job_id))
    with pytest.raises(LeaseLost):
        await leases.complete(job_id, "token-a", '"stale"')
    with pytest.raises(LeaseLost):
        await leases.fail(job_id, "token-a", "stale failure")
    assert await leases.renew([(job_id, "token-a")]) == [job_id]
    assert await redis_client.hgetall(DINING.job(job_id)) == before
    assert await redis_client.exists(DINING.result(job_id)) == 0
    # The retry runs under a new token and completes exactly once.
    await eventually(lambda: chores.promote(), within=5)
    job_id = await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    _, claims = await leases.claim("other-worker", [(job_id, "token-b")])
    assert claims[0].attempt == 2
    await leases.complete(job_id, "token-b", '"fresh"')
    await leases.complete(job_id, "token-b", '"fresh"')  # a replayed call is a no-op
    assert (await queue.get_result(job_id)) is not None
    assert (await counters(queue))["completed"] == 1


@pytest.mark.single_node(ONE_SLOT)
async def test_renewal_keeps_a_long_job_and_stop_gives_unfinished_ones_back(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    async def sleepy(job: JobPayload) -> str:
        await asyncio.sleep(float(job.constraints["seconds"]))
        return "slept"

    long_job = make_job(constraints={"seconds": 2.5})  # 2.5 leases long
    endless = make_job(constraints={"seconds": 60})
    await queue.enqueue_many([long_job, endless])
    settings = queue.settings.with_overrides(shutdown_timeout=0.3)
    async with running_worker(settings, sleepy) as worker:
        result = await eventually(lambda: queue.get_result(long_job["job_id"]))
        assert result.ok
    assert worker.counts["released"] == 1
    record = await redis_client.hgetall(DINING.job(endless["job_id"]))
    assert (record["state"], record["attempts"]) == ("queued", "0")
    assert await redis_client.lrange(DINING.queue, 0, -1) == [endless["job_id"]]
    counts = await counters(queue)
    assert (counts["started"], counts["retried"], counts["completed"]) == (2, 0, 1)
    assert await redis_client.zcard(DINING.workers) == 0  # it said goodbye


async def test_renewal_skips_attempts_its_own_token_ended_and_reports_stolen_ones(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """A renewal that reaches Redis after the worker's own completion or failure of an
    attempt (the two calls race) must not report that attempt as lost; a job whose
    token changed hands still is."""
    connection = await QueueConnection.open(queue.settings)
    try:
        leases = AttemptCalls(connection, "dining")
        jobs = [make_job() for _ in range(3)]
        await queue.enqueue_many(jobs)
        taken = [
            await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") for _ in jobs
        ]
        tokens = ["token-done", "token-retry", "token-run"]
        _, claims = await leases.claim("worker-a", list(zip(taken, tokens, strict=True)))
        assert len(claims) == 3
        done, retried, running = taken
        await leases.complete(done, "token-done", '"ok"')
        assert await leases.fail(retried, "token-retry", "boom") == "retrying"
        held = list(zip(taken, tokens, strict=True))
        assert await leases.renew(held) == []
        # Fencing is intact: a token that does not own the job is refused, nothing moves.
        before = await redis_client.zscore(DINING.leases, running)
        assert await leases.renew([(running, "token-stale"), (done, "token-x")]) == [
            running,
            done,
        ]
        assert await redis_client.zscore(DINING.leases, running) == before
        assert await redis_client.zscore(DINING.leases, done) is None
    finally:
        await connection.aclose()


async def test_many_short_jobs_under_a_short_lease_never_lose_one(
    queue: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewals (every lease/3) constantly race completions, failures and the same
    worker re-claiming a retried job: no attempt may be reported lost or cancelled,
    and every job completes exactly once."""

    async def quick(job: JobPayload) -> str:
        if job.constraints.get("flaky") and current_job().attempt == 1:
            raise RuntimeError("first attempt fails")
        await asyncio.sleep(0.001 * (hash(job.task) % 5))
        return "done"

    jobs = [make_job(constraints={"flaky": i % 4 == 0}) for i in range(600)]
    # Renewals every 200 ms, against jobs of 0-4 ms: they race completions all the time.
    # A lease shorter than a stall of the machine is lost by design (the reaper may take
    # it back): 0.15 s was, once, on 2 cores running the whole suite beside a cluster,
    # and 0.3 s was too, with a second test run beside the suite.
    settings = queue.settings.with_overrides(
        lease_seconds=0.6, backoff_base=0.01, promote_interval=0.01
    )
    caplog.set_level("WARNING", logger="platform_common.jobs.worker")

    async def all_done() -> bool:
        return (await counters(queue))["completed"] >= len(jobs)

    async with running_worker(settings, quick, concurrency=8) as worker:
        await queue.enqueue_many(jobs)
        await eventually(all_done, within=60)
    counts = await counters(queue)
    flaky = sum(1 for job in jobs if job["constraints"]["flaky"])
    assert worker.counts["lost"] == 0
    assert [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()] == []
    assert (counts["completed"], counts["retried"], counts["started"]) == (
        len(jobs),
        flaky,
        len(jobs) + flaky,
    )
    assert worker.counts["succeeded"] == len(jobs)


async def test_registering_a_type_creates_every_latency_bucket_with_zero(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    fields = [latency_bucket_field(b) for b in (*queue.settings.latency_buckets, float("inf"))]
    await queue.enqueue(make_job())  # the producer registers the type: no completion yet
    stored = await redis_client.hgetall(DINING.stats)
    assert {field: stored.get(field) for field in fields} == dict.fromkeys(fields, "0")
    # A completion counts in its bucket; another process registering keeps the counts.
    async with running_worker(queue.settings, echo):
        await eventually(lambda: all_completed(queue, 1))
    before = await redis_client.hmget(DINING.stats, fields)
    assert sorted(before) == ["0"] * (len(fields) - 1) + ["1"]
    connection = await QueueConnection.open(queue.settings)
    try:
        await connection.register_type("dining")
        assert await redis_client.hmget(DINING.stats, fields) == before
    finally:
        await connection.aclose()


async def all_completed(queue: JobQueue, expected: int) -> bool:
    return (await counters(queue))["completed"] >= expected
