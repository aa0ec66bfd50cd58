"""The stats hash's breakdowns for on-call: where a job's time goes (wait vs run, beside
the end-to-end latency) and which exception classes failed its attempts (capped)."""

from __future__ import annotations

import pytest

from platform_common.jobs.keys import MAX_ERROR_CLASSES, QueueKeys
from platform_common.jobs.queue import JobQueue, QueueState
from platform_common.jobs.queue.error_class import error_class_of
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.support.queue_handlers import make_job

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(max_attempts=3, register=("dining",))


async def running(queue: JobQueue, redis_client: RedisClient, token: str = "t1") -> str:
    job_id: str = await queue.enqueue(make_job())
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    _, claims = await AttemptCalls(queue.connection, "dining").claim("w1", [(job_id, token)])
    assert [claim.job_id for claim in claims] == [job_id]
    return job_id


async def stats(redis_client: RedisClient) -> dict[str, str]:
    fields: dict[str, str] = await redis_client.hgetall(DINING.stats)
    return fields


async def test_wait_and_run_split_the_latency_of_a_first_attempt(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job_id = await running(queue, redis_client)
    started = int(await redis_client.hget(DINING.job(job_id), "started_at"))
    # Planted 3 s of waiting and 1.5 s in the handler (both read against Redis TIME).
    await redis_client.hset(DINING.job(job_id), mapping={
        "enqueued_at": started - 4500, "started_at": started - 1500,
    })  # fmt: skip
    await AttemptCalls(queue.connection, "dining").complete(job_id, "t1", "1")
    fields = await stats(redis_client)
    assert float(fields["wait_sum"]) == 3.0
    assert fields["wait_le:5"] == "1" and fields["wait_count"] == "1"
    assert float(fields["run_sum"]) >= 1.5 and fields["run_count"] == "1"
    # Exact in ms: enqueue -> start -> end.
    assert round(float(fields["latency_sum"]) * 1000) == round(
        float(fields["wait_sum"]) * 1000 + float(fields["run_sum"]) * 1000
    )
    for histogram in ("latency", "wait", "run"):
        buckets = [v for k, v in fields.items() if k.startswith(f"{histogram}_le:") and v != "0"]
        assert buckets == ["1"], (histogram, fields)


async def test_wait_of_a_retry_counts_from_its_due_time(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = AttemptCalls(queue.connection, "dining")
    job_id = await running(queue, redis_client)
    assert await leases.fail(job_id, "t1", "TimeoutError: slow") == QueueState.RETRYING
    await redis_client.zadd(DINING.delayed, {job_id: 0}, xx=True)
    assert await Chores(queue.connection, "dining").promote() == 1
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    await leases.claim("w1", [(job_id, "t2")])
    started = int(await redis_client.hget(DINING.job(job_id), "started_at"))
    await redis_client.hset(DINING.job(job_id), mapping={"due_at": started - 250, "enqueued_at": 1})
    await leases.complete(job_id, "t2", "1")
    fields = await stats(redis_client)
    assert float(fields["wait_sum"]) == 0.25  # from the retry's due time, not the enqueue
    assert fields["wait_le:0.25"] == "1"


async def test_failed_attempts_are_counted_by_exception_class(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = AttemptCalls(queue.connection, "dining")
    first = await running(queue, redis_client, "a")
    assert await leases.fail(first, "a", "ValueError: bad input") == QueueState.RETRYING
    second = await running(queue, redis_client, "b")
    assert await leases.fail(second, "b", "ValueError: again", mode="fatal") == "failed"
    third = await running(queue, redis_client, "c")
    # A release gives the attempt back unstarted: no failure, no class.
    assert await leases.fail(third, "c", "worker shut down", mode="release") == "released"
    fields = await stats(redis_client)
    assert fields["error:ValueError"] == "2" and fields["error_classes"] == "1"
    assert "error:other" not in fields
    # Every error-ending attempt is counted once: retried + failed.
    counted = sum(int(v) for k, v in fields.items() if k.startswith("error:"))
    assert counted == int(fields["retried"]) + int(fields["failed"]) == 2


async def test_the_reaper_counts_a_lapsed_lease_as_lease_expired(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job_id = await running(queue, redis_client)
    await redis_client.zadd(DINING.leases, {job_id: 1})  # lapsed: the worker stopped renewing
    report = await Chores(queue.connection, "dining").reap()
    assert report.retried == 1
    assert (await stats(redis_client))["error:LeaseExpired"] == "1"


async def test_classes_past_the_cap_count_as_other(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = AttemptCalls(queue.connection, "dining")
    await redis_client.hset(DINING.stats, mapping={"error_classes": MAX_ERROR_CLASSES - 1})
    for index, error in enumerate(["KeyError: 'a'", "OSError: b", "KeyError: 'c'", "E.F: d"]):
        job_id = await running(queue, redis_client, f"t{index}")
        await leases.fail(job_id, f"t{index}", error, mode="fatal")
    fields = await stats(redis_client)
    # KeyError took the last free place; later classes are "other"; KeyError still counts.
    assert fields["error:KeyError"] == "2" and fields["error:other"] == "2"
    assert fields["error_classes"] == str(MAX_ERROR_CLASSES)
    assert "error:OSError" not in fields and "error:E.F" not in fields


@pytest.mark.parametrize(
    ("error", "mode", "expected"),
    [
        ("ValueError: x", "error", "ValueError"),
        ("TimeoutError", "fatal", "TimeoutError"),
        ("lease expired: the worker stopped renewing", "lost", "LeaseExpired"),
        ("stored field 'ttl' of the job does not parse: 'x'", "corrupt", "CorruptJob"),
        ("result is not JSON-serialisable: TypeError: set", "fatal", "other"),
        ("Ünïcode: x", "error", "other"),
    ],
)
def test_error_class_of_the_recorded_error_text(error: str, mode: str, expected: str) -> None:
    assert error_class_of(error, mode) == expected
