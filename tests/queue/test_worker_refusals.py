"""A worker facing corrupt queue state (a key of another type, a counter that does not
parse): the script refuses before writing, the worker logs one ERROR naming the key
(no traceback), keeps going, and nothing is lost: once the key is repaired every job
runs, with no attempt charged for a refused claim."""

from __future__ import annotations

import asyncio
import logging
from typing import TypeVar

import pytest
from redis.exceptions import OutOfMemoryError

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.queue.backend_errors import RedisHealth
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls
from platform_common.jobs.worker.lease_keeper import LeaseKeeper
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker
from tests.support.stored_jobs import stored_fields

DINING = QueueKeys("dining")
_T = TypeVar("_T")
CONSUMER = "platform_common.jobs.worker"
# Each script's refusal on a cluster is in test_script_faults.py; what the worker makes
# of one is its own, whatever Redis refused.
REPORTED = "how the worker reports a refusal, whatever Redis refused"


def refusals(caplog: pytest.LogCaptureFixture, activity: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(f"{activity} refused: ")]


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """No internal error, nothing logged with a traceback: a refusal is no bug."""
    assert not [r for r in caplog.records if r.exc_info or "internal error" in r.getMessage()]


async def succeeded(queue: JobQueue, job_id: str) -> bool:
    outcome = await queue.get_result(job_id, "dining")
    return outcome is not None and outcome.status == "succeeded"


async def done(job: object) -> str:
    return "done"


@pytest.mark.single_node(REPORTED)
async def test_a_refused_claim_charges_nothing_and_the_jobs_run_once_repaired(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger=CONSUMER)
    job_id = await queue.enqueue(make_job())
    await redis_client.hset(DINING.stats, "started", "many")
    async with running_worker(queue.settings, done):
        (line,) = await eventually(lambda: _async(refusals(caplog, "claiming jobs")))
        assert line.levelno == logging.ERROR
        message = line.getMessage()
        assert f"corrupt queue state at {DINING.stats}: field started is not an integer" in message
        assert "stay in the processing list, where the reaper returns them" in message
        # The refused claim wrote nothing: the job was never started, still packed.
        assert not await redis_client.exists(DINING.job(job_id))
        fields = await stored_fields(redis_client, DINING, job_id)
        assert fields["state"] == "queued" and "attempts" not in fields
        await redis_client.hdel(DINING.stats, "started")
        await eventually(lambda: succeeded(queue, job_id))
    assert await redis_client.hget(DINING.job(job_id), "attempts") == "1"
    assert await redis_client.hmget(DINING.stats, ["started", "completed"]) == ["1", "1"]
    assert len(refusals(caplog, "claiming jobs")) == 1
    assert_no_traceback(caplog)


@pytest.mark.single_node(REPORTED)
async def test_a_refused_failure_leaves_the_job_leased_for_the_reaper(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler raised, but the retried counter does not parse: the failure is
    refused whole. The job stays running under its lease; once the key is repaired the
    reaper ends that attempt (a retry) and the next one runs."""
    caplog.set_level("INFO", logger=CONSUMER)
    calls = 0

    async def fails_once(job: object) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first try")
        return "done"

    job_id = await queue.enqueue(make_job())
    await redis_client.hset(DINING.stats, "retried", "many")
    async with running_worker(queue.settings, fails_once) as worker:
        (line,) = await eventually(lambda: _async(refusals(caplog, "recording a job's outcome")))
        assert line.levelno == logging.ERROR
        assert line.getMessage().endswith(
            f"refused: corrupt queue state at {DINING.stats}: field retried is not an "
            f"integer: 'many'; job={job_id} (its attempt failed with RuntimeError: first "
            "try) stays leased until its lease lapses, then the reaper retries it"
        )
        state = await redis_client.hmget(DINING.job(job_id), ["state", "attempts"])
        assert state == ["running", "1"]
        assert await redis_client.zscore(DINING.leases, job_id) is not None
        await redis_client.hdel(DINING.stats, "retried")
        await eventually(lambda: succeeded(queue, job_id))
        assert worker.counts["retrying"] == 0  # the reaper, not the worker, ended it
    assert await redis_client.hget(DINING.job(job_id), "attempts") == "2"
    assert await redis_client.hget(DINING.stats, "retried") == "1"
    assert len(refusals(caplog, "recording a job's outcome")) == 1
    assert_no_traceback(caplog)


@pytest.mark.single_node(REPORTED)
async def test_a_refused_chore_is_reported_and_the_worker_keeps_running_jobs(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The delayed set holds a string: cleanup (with a job due, here an entry whose
    record is gone) and the promoter are refused with the key named, every run;
    claiming and completing never touch that key."""
    caplog.set_level("INFO", logger=CONSUMER)
    await redis_client.set(DINING.delayed, "not a sorted set")
    await redis_client.zadd(DINING.expiry, {"gone": 1})
    async with running_worker(queue.settings, done):
        (line, *_) = await eventually(lambda: _async(refusals(caplog, "expiring jobs")))
        job_id = await queue.enqueue(make_job())
        await eventually(lambda: succeeded(queue, job_id))
    assert line.levelno == logging.ERROR
    assert line.getMessage() == (
        f"expiring jobs refused: corrupt queue state at {DINING.delayed}: holds a "
        "string, where the queue keeps a zset; retrying every 0.2s"
    )
    assert_no_traceback(caplog)


@pytest.mark.single_node("the lease keeper's bookkeeping: one server shows it")
async def test_a_renewal_that_wrote_nothing_does_not_end_out_of_memory(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """At maxmemory reads still work: a renewal that found every lease lost only read,
    so it says nothing of whether Redis accepts writes again; one that renewed does."""
    health = RedisHealth(logging.getLogger(CONSUMER), queue.settings.redis)
    health.failed("renewing leases", OutOfMemoryError("command not allowed when used memory"))
    lost: list[str] = []
    keeper = LeaseKeeper(
        queue.settings, "dining", loop=asyncio.get_running_loop(),
        on_lost=lambda job_id, token: lost.append(job_id), health=health,
        logger=logging.getLogger(CONSUMER),
    )  # fmt: skip
    keeper.hold("no-such-job", "token-a")
    keeper.start()
    try:
        await eventually(lambda: _async(lost))
        assert health.down and keeper.renewals >= 1
        keeper.drop("token-a")

        job_id = await queue.enqueue(make_job())
        await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
        await AttemptCalls(queue.connection, "dining").claim("worker-1", [(job_id, "token-b")])
        keeper.hold(job_id, "token-b")
        await eventually(lambda: _async(not health.down))
    finally:
        await asyncio.to_thread(keeper.stop)
    assert lost == ["no-such-job"]


async def _async(value: _T) -> _T:
    """`value` as an awaitable (eventually() polls awaitables)."""
    return value
