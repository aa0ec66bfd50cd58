"""Upgrading over a live queue: jobs the previous key layout left running, delayed or dead
(written by that version's enqueue, claim and fail scripts, kept in tests/queue/legacy/,
called with the keys and arguments its worker passed) are taken back, promoted and
requeued by this version, and run exactly once. In the previous layout a job that had
left the queue list lived in its job hash alone (state, token, attempts, history), with
a `leases`, `delayed` or `dead` entry and an `expiry` one: the very keys and fields this
version keeps for a claimed, retrying or dead-lettered job. No upgrade step is needed."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
LEGACY = Path(__file__).parent / "legacy"
LEGACY_ENQUEUE = (LEGACY / "queue_enqueue_v1.lua").read_text()
LEGACY_CLAIM = (LEGACY / "queue_claim_v1.lua").read_text()
LEGACY_FAIL = (LEGACY / "queue_fail_v1.lua").read_text()

OLD_WORKER = "old-host:4242:0a1b2c"
"""The previous version's worker that took the jobs (it is gone: no heartbeat)."""
OLD_BACKOFF_MS = [200, 2.0, 300_000]
"""(base ms, factor, max ms), as its AttemptCalls passed settings.backoff_ms()."""
OLD_RETENTION_S = 14 * 86_400
"""Its dead_letter_retention default, as settings.retention_seconds() passed it."""
OLD_MAX_ERROR_CLASSES = 20


async def legacy_enqueue(client: RedisClient, job: dict[str, Any], max_attempts: int = 3) -> None:
    """Enqueue `job` as the previous version did (its script, its keys and arguments)."""
    created_ms = int(datetime.fromisoformat(job["created_at"]).timestamp() * 1000)
    job_id = job["job_id"]
    keys = [DINING.queue, DINING.stats, DINING.expiry, DINING.waiting]
    keys += [DINING.job(job_id), DINING.result(job_id)]
    args: list[Any] = [f"legacy:{job_id}", 1, created_ms, 300_000]
    args += [job_id, json.dumps(job), job["ttl_seconds"], created_ms, max_attempts, ""]
    reply = await client.eval(LEGACY_ENQUEUE, len(keys), *keys, *args)
    assert reply == ["ok", 1]


async def legacy_take(client: RedisClient, job_id: str, lease_ms: int) -> str:
    """Take the job as the previous worker did (BLMOVE queue -> processing, then its
    claim script); returns the lease token it chose."""
    assert await client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    token = f"0badc0de{job_id[:8]}"
    keys = [DINING.processing, DINING.leases, DINING.stats, DINING.expiry]
    keys += [DINING.queue, DINING.waiting, DINING.job(job_id), DINING.result(job_id)]
    args: list[Any] = [lease_ms, OLD_WORKER, DINING.channel, job_id, token]
    reply = await client.eval(LEGACY_CLAIM, len(keys), *keys, *args)
    assert reply[0] == 0 and reply[1][:3] == [job_id, "run", token]
    return token


async def legacy_fail(client: RedisClient, job_id: str, token: str) -> list[Any]:
    """End the attempt as the previous worker did when its handler raised (mode "error")."""
    keys = [DINING.processing, DINING.leases, DINING.delayed, DINING.dead, DINING.queue]
    keys += [DINING.expiry, DINING.stats, DINING.job(job_id), DINING.result(job_id)]
    keys += [DINING.waiting, DINING.failed]
    error = "RuntimeError: the booking site timed out"
    args: list[Any] = [job_id, "error", token, error, DINING.channel, *OLD_BACKOFF_MS]
    args += ["", OLD_RETENTION_S, "RuntimeError", OLD_MAX_ERROR_CLASSES]
    reply: list[Any] = await client.eval(LEGACY_FAIL, len(keys), *keys, *args)
    return reply


async def run_until_completed(queue: JobQueue, redis_url: str) -> RanJobs:
    """Run a worker of this version until the queue counts one completion."""
    recorder = RanJobs()
    async with running_worker(fast_settings(redis_url), recorder):

        async def done() -> bool:
            return (await queue.stats("dining")).counters["completed"] == 1

        await eventually(done)
    return recorder


async def assert_succeeded_alone(queue: JobQueue, job_id: str) -> dict[str, int]:
    result = await queue.get_result(job_id, "dining")
    assert result is not None and result.status == "succeeded"
    stats = await queue.stats("dining")
    assert (stats.queued, stats.in_progress, stats.delayed, stats.dead) == (0, 0, 0, 0)
    assert stats.counters["completed"] == 1 and stats.counters["expired"] == 0
    return stats.counters


async def test_a_running_job_of_the_previous_layout_is_taken_back_from_its_dead_worker(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    job = make_job()
    job_id = job["job_id"]
    await legacy_enqueue(redis_client, job)
    await legacy_take(redis_client, job_id, lease_ms=1)  # then its worker died
    assert await redis_client.hget(DINING.job(job_id), "state") == "running"
    assert await redis_client.zscore(DINING.leases, job_id) is not None
    assert (await queue.stats("dining")).in_progress == 1

    recorder = await run_until_completed(queue, redis_url)
    assert recorder.ran == [job_id]
    counters = await assert_succeeded_alone(queue, job_id)
    # The dead worker's attempt counts as a started, crashed and retried one.
    assert counters["enqueued"] == 1 and counters["started"] == 2
    assert counters["retried"] == 1 and counters["failed"] == 0
    assert not await redis_client.exists(DINING.leases, DINING.processing, DINING.waiting)


async def test_a_delayed_retry_of_the_previous_layout_is_promoted_and_run(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    job = make_job()
    job_id = job["job_id"]
    await legacy_enqueue(redis_client, job)
    token = await legacy_take(redis_client, job_id, lease_ms=30_000)
    reply = await legacy_fail(redis_client, job_id, token)
    assert reply[0] == "retrying"
    assert await redis_client.zscore(DINING.delayed, job_id) is not None
    assert await redis_client.hget(DINING.job(job_id), "state") == "retrying"
    assert (await queue.stats("dining")).delayed == 1

    recorder = await run_until_completed(queue, redis_url)
    assert recorder.ran == [job_id]
    counters = await assert_succeeded_alone(queue, job_id)
    assert counters["enqueued"] == 1 and counters["started"] == 2
    assert counters["retried"] == 1 and counters["failed"] == 0
    assert not await redis_client.exists(DINING.delayed, DINING.leases, DINING.processing)


async def test_a_dead_letter_of_the_previous_layout_is_requeued_and_run(
    queue: JobQueue, redis_url: str, redis_client: RedisClient
) -> None:
    job = make_job()
    job_id = job["job_id"]
    await legacy_enqueue(redis_client, job, max_attempts=1)
    token = await legacy_take(redis_client, job_id, lease_ms=30_000)
    assert await legacy_fail(redis_client, job_id, token) == ["dead"]
    assert await redis_client.lrange(DINING.dead, 0, -1) == [job_id]
    failed = await queue.get_result(job_id, "dining")
    assert failed is not None and failed.status == "failed"
    assert [letter.job_id for letter in await queue.dead_letters.list("dining")] == [job_id]

    assert await queue.dead_letters.requeue("dining", [job_id]) == [job_id]
    assert await queue.get_result(job_id, "dining") is None
    recorder = await run_until_completed(queue, redis_url)
    assert recorder.ran == [job_id]
    counters = await assert_succeeded_alone(queue, job_id)
    assert counters["enqueued"] == 2 and counters["started"] == 2
    assert counters["failed"] == 1 and counters["dead_lettered"] == 1
    assert await queue.dead_letters.count("dining") == 0
