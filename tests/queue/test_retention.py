"""What expires when (docs/operations.md, "What expires when"): every sentence there is
one of these tests, or one in the file its bullet names in brackets. Jobs kept for an
operator (dead letters, failed jobs) last dead_letter_retention and each list holds at
most dead_letter_max; the cleanup prunes the oldest end in bounded steps; a requeue
makes the job live again (no TTL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, NonRetryableError, QueueSettings
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.status import QueueState
from platform_common.jobs.worker.chores import Chores
from platform_common.jobs.worker.retention import Retention
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.stored_jobs import make_packed_due, stored_fields, to_job_hash

DINING = QueueKeys("dining")
HOUR = 3600
pytestmark = pytest.mark.queue(max_attempts=1, dead_letter_retention=HOUR)


async def ends_as_told(job: JobPayload) -> str:
    """Succeeds, fails (dead-lettered after max_attempts=1) or fails for good, by task."""
    if job.task.startswith("fatal"):
        raise NonRetryableError(f"{job.task} makes no sense")
    if job.task.startswith("broken"):
        raise RuntimeError(f"{job.task} failed")
    return "fine"


async def run_to_the_end(queue: JobQueue, jobs: list[dict[str, Any]], **overrides: Any) -> None:
    """Enqueue `jobs` and run a worker until each has a result. A long cleanup interval
    by default, so the worker's own pruning runs once, before any job ended."""
    await queue.enqueue_many(jobs)
    settings = queue.settings.with_overrides(**{"cleanup_interval": 3600.0, **overrides})
    async with running_worker(settings, ends_as_told):
        for job in jobs:
            await eventually(lambda job=job: queue.get_result(job["job_id"]))


async def expiry_ms(client: RedisClient, key: str) -> int:
    return int(await client.execute_command("PEXPIRETIME", key))


async def finished_ms(client: RedisClient, job_id: str) -> int:
    return int(await client.hget(DINING.job(job_id), "finished_at"))


async def assert_balanced(queue: JobQueue, live: int = 0) -> None:
    counters = (await queue.stats("dining")).counters
    ended = counters["completed"] + counters["failed"] + counters["expired"]
    assert counters["enqueued"] == ended + live, counters


async def test_a_succeeded_job_keeps_record_and_result_for_its_ttl(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job = make_job(task="ok", ttl_seconds=120)
    await run_to_the_end(queue, [job])
    ended = await finished_ms(redis_client, job["job_id"])
    for key in (DINING.job(job["job_id"]), DINING.result(job["job_id"])):
        assert abs(await expiry_ms(redis_client, key) - (ended + 120_000)) <= 1000, key
    await assert_balanced(queue)


async def test_an_unfinished_job_has_no_ttl_and_its_expired_result_lasts_its_ttl(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job_id = await queue.enqueue(make_job(task="ok", ttl_seconds=60))
    # Waiting unclaimed, the job is a field of `queued`; the first job is in deadline
    # order, so no expiry bucket entry: the cleanup finds it at the list's tail.
    expires_at = int((await stored_fields(redis_client, DINING, job_id))["expires_at"])
    assert (await redis_client.hget(DINING.queued, job_id)).split("\n", 1)[0].endswith(",o")
    assert not await redis_client.exists(DINING.expiring_bucket(expires_at), DINING.expiring)
    for key in (DINING.queued, DINING.queue, DINING.arrived, DINING.arrivals):
        assert await redis_client.ttl(key) == -1, key
    assert not await redis_client.exists(DINING.job(job_id))
    # One waiting with a job hash (requeued, released; a claim writes the same) has no
    # TTL either: the expiry set times it.
    claimed = make_job(task="ok", ttl_seconds=60)
    await to_job_hash(redis_client, DINING, await queue.enqueue(claimed))
    assert await redis_client.ttl(DINING.job(claimed["job_id"])) == -1
    assert await redis_client.zscore(DINING.expiry, claimed["job_id"]) is not None
    # Created 59.5 s ago with a 60 s TTL, its deadline (and whole expiry bucket) moved
    # into the past: found by the cleanup.
    late = make_job(created_at=(datetime.now(UTC) - timedelta(seconds=59.5)).isoformat())
    late_id = await queue.enqueue(late)
    # Due before the jobs ahead of it, it is out of deadline order: its expiry bucket
    # times it, and neither the bucket nor the expiring set has a TTL.
    late_at = int((await stored_fields(redis_client, DINING, late_id))["expires_at"])
    late_bucket = DINING.expiring_bucket(late_at)
    assert await redis_client.lrange(late_bucket, 0, -1) == [late_id]
    for key in (late_bucket, DINING.expiring):
        assert await redis_client.ttl(key) == -1, key
    await make_packed_due(redis_client, DINING, [late_id])
    assert await eventually(lambda: queue.cleanup("dining")) == [late_id]
    assert not await redis_client.exists(DINING.job(late_id))
    assert await redis_client.hget(DINING.queued, late_id) is None
    outcome = await queue.get_result(late_id)
    assert outcome is not None and outcome.status == QueueState.EXPIRED
    assert 0 < await redis_client.ttl(DINING.result(late_id)) <= 60
    await assert_balanced(queue, live=2)


@pytest.mark.parametrize(
    ("task", "kept_list", "state"),
    [("broken", DINING.dead, "dead"), ("fatal", DINING.failed, "failed")],
)
async def test_a_job_that_ended_unsuccessfully_is_kept_for_the_retention(
    queue: JobQueue, redis_client: RedisClient, task: str, kept_list: str, state: str
) -> None:
    job = make_job(task=task, ttl_seconds=60)
    await run_to_the_end(queue, [job])
    job_id = job["job_id"]
    assert await redis_client.lrange(kept_list, 0, -1) == [job_id]
    assert await redis_client.hget(DINING.job(job_id), "state") == state
    ended = await finished_ms(redis_client, job_id)
    for key in (DINING.job(job_id), DINING.result(job_id)):
        assert abs(await expiry_ms(redis_client, key) - (ended + HOUR * 1000)) <= 1000, key
    counters = (await queue.stats("dining")).counters
    assert (counters["failed"], counters["dead_lettered"]) == (1, int(state == "dead"))
    await assert_balanced(queue)


async def test_a_failed_job_is_listed_apart_from_the_dead_letters(queue: JobQueue) -> None:
    fatal, broken = make_job(task="fatal one"), make_job(task="broken one")
    await run_to_the_end(queue, [fatal, broken])
    (failed,) = await queue.failed_jobs.list("dining")
    (dead,) = await queue.dead_letters.list("dining")
    assert (failed.job_id, failed.state) == (fatal["job_id"], QueueState.FAILED)
    assert failed.history[-1]["outcome"] == "fatal"
    assert failed.last_error == "NonRetryableError: fatal one makes no sense"
    assert (dead.job_id, dead.state) == (broken["job_id"], QueueState.DEAD)
    assert await queue.failed_jobs.count("dining") == 1
    assert (await queue.stats("dining")).dead == 1  # dead_letter_depth: the dead list only


async def test_the_retention_never_cuts_a_longer_ttl_short(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    job = make_job(task="fatal", ttl_seconds=2 * HOUR)
    await run_to_the_end(queue, [job])
    ended = await finished_ms(redis_client, job["job_id"])
    expires = await expiry_ms(redis_client, DINING.result(job["job_id"]))
    assert abs(expires - (ended + 2 * HOUR * 1000)) <= 1000


async def test_a_requeue_makes_the_job_live_again_without_a_ttl(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    broken, fatal = make_job(task="broken"), make_job(task="fatal")
    await run_to_the_end(queue, [broken, fatal])
    assert await queue.dead_letters.requeue("dining", [broken["job_id"]]) == [broken["job_id"]]
    assert await queue.failed_jobs.requeue("dining", [fatal["job_id"]]) == [fatal["job_id"]]
    for job in (broken, fatal):
        assert await redis_client.ttl(DINING.job(job["job_id"])) == -1
        assert not await redis_client.exists(DINING.result(job["job_id"]))
        # No state: a job hash without one is a queued job's (the requeue deletes it).
        assert await redis_client.hget(DINING.job(job["job_id"]), "state") is None
    assert await redis_client.llen(DINING.dead) == await redis_client.llen(DINING.failed) == 0
    await assert_balanced(queue, live=2)


async def test_the_count_cap_prunes_the_oldest_with_record_and_result(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    capped = queue.settings.with_overrides(dead_letter_max=3)
    jobs = [make_job(task=f"broken {i}") for i in range(5)]
    await run_to_the_end(queue, jobs)  # the worker's cap is the default 10,000
    newest_first = await redis_client.lrange(DINING.dead, 0, -1)
    assert len(newest_first) == 5  # nothing pruned yet
    before = (await queue.stats("dining")).counters
    async with await JobQueue.connect(capped) as capped_queue:
        report = await Chores(capped_queue.connection, "dining").prune_kept()
    assert (report.beyond_cap, report.expired) == (2, 0)
    assert await redis_client.lrange(DINING.dead, 0, -1) == newest_first[:3]
    for job_id in newest_first[3:]:
        assert not await redis_client.exists(DINING.job(job_id), DINING.result(job_id))
    for job_id in newest_first[:3]:
        assert await redis_client.exists(DINING.job(job_id), DINING.result(job_id)) == 2
    assert (await queue.stats("dining")).counters == before  # pruning counts nothing
    await assert_balanced(queue)


async def test_one_pruning_run_looks_only_at_the_oldest_batch(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    jobs = [make_job(task=f"fatal {i}") for i in range(5)]
    await run_to_the_end(queue, jobs)
    async with await JobQueue.connect(queue.settings.with_overrides(dead_letter_max=1)) as capped:
        retention = Retention(capped.connection, "dining")
        report = await retention.prune(batch=2)
        assert report.beyond_cap == 2 and await redis_client.llen(DINING.failed) == 3
        report = await retention.prune()  # PRUNE_BATCH (500) covers the rest
        assert report.beyond_cap == 2 and await redis_client.llen(DINING.failed) == 1


async def test_entries_whose_record_passed_its_retention_are_pruned(
    redis_url: str, redis_client: RedisClient
) -> None:
    settings = fast_settings(redis_url, max_attempts=1, dead_letter_retention=1)
    async with await JobQueue.connect(settings) as queue:
        jobs = [make_job(task="broken", ttl_seconds=1), make_job(task="fatal", ttl_seconds=1)]
        await run_to_the_end(queue, jobs)
        for job in jobs:  # Redis drops record and result after the 1 s retention
            await eventually(
                lambda job=job: _gone(
                    redis_client, DINING.job(job["job_id"]), DINING.result(job["job_id"])
                )
            )
        assert await redis_client.llen(DINING.dead) == await redis_client.llen(DINING.failed) == 1
        assert await queue.dead_letters.list("dining") == []  # an expired entry is not listed
        assert await queue.dead_letters.count("dining") == 1  # but counts until pruned
        assert await queue.failed_jobs.count("dining") == 1
        report = await Chores(queue.connection, "dining").prune_kept()
        assert (report.beyond_cap, report.expired) == (0, 2)
        assert await redis_client.llen(DINING.dead) == await redis_client.llen(DINING.failed) == 0
        await assert_balanced(queue)


async def _gone(client: RedisClient, *keys: str) -> bool:
    return int(await client.exists(*keys)) == 0


async def test_a_worker_prunes_in_its_cleanup_chore(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    await queue.enqueue_many([make_job(task=f"broken {i}") for i in range(4)])
    async with running_worker(queue.settings.with_overrides(dead_letter_max=2), ends_as_told):
        await eventually(lambda: _all_ended_two_kept(queue, redis_client))
    await assert_balanced(queue)


async def _all_ended_two_kept(queue: JobQueue, client: RedisClient) -> bool:
    failed = (await queue.stats("dining")).counters["failed"]
    return failed == 4 and await client.llen(DINING.dead) == 2


async def test_silent_workers_heartbeats_are_forgotten_the_counters_never_expire(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    await run_to_the_end(queue, [make_job(task="ok")])
    maintenance = Chores(queue.connection, "dining")
    now_ms = await maintenance.redis_time_ms()
    prune_ms = int(queue.settings.heartbeat_interval * 10 * 1000)
    await redis_client.zadd(DINING.workers, {"silent": now_ms - prune_ms - 1000, "recent": now_ms})
    await maintenance.heartbeat("another")
    assert set(await redis_client.zrange(DINING.workers, 0, -1)) == {"recent", "another"}
    for key in (DINING.stats, DINING.workers, QueueKeys.types_key()):
        assert await redis_client.ttl(key) == -1, key


def test_retention_settings_come_from_the_environment_and_are_bounded() -> None:
    settings = QueueSettings.from_env(
        {"QUEUE_DEAD_LETTER_RETENTION": "336h", "QUEUE_DEAD_LETTER_MAX": "500"}
    )
    assert (settings.dead_letter_retention, settings.dead_letter_max) == (1_209_600, 500)
    assert settings.retention_seconds() == 1_209_600
    defaults = QueueSettings()
    assert (defaults.dead_letter_retention, defaults.dead_letter_max) == (14 * 86_400, 10_000)
    assert QueueSettings(dead_letter_retention=1.2).retention_seconds() == 2  # whole seconds
    for variable, value in [
        ("QUEUE_DEAD_LETTER_MAX", "0"),
        ("QUEUE_DEAD_LETTER_MAX", "10000001"),
        ("QUEUE_DEAD_LETTER_RETENTION", "0.5"),
        ("QUEUE_DEAD_LETTER_RETENTION", "99999999999"),
    ]:
        with pytest.raises(ConfigurationError) as refused:
            QueueSettings.from_env({variable: value})
        assert variable in str(refused.value)
