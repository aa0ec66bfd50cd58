"""Whatever a handler does ends its attempt truthfully: any BaseException is a failed
attempt (retried with backoff, then dead-lettered) and the worker survives it; a plain
`def` handler runs in a thread; a handler that blocks the loop keeps its lease and runs
once; a stopping worker gives running attempts back uncounted."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import (
    HandlerBaseException,
    behaviour,
    make_job,
)
from tests.support.queue_runtime import eventually, running_worker
from tests.support.sync_redis import sync_reply
from tests.support.worker_records import SyncClient, job_history, result, runs
from tests.support.workers import FAST_SETTINGS, WorkerGroup, wait_until

DINING = QueueKeys("dining")
# What the worker makes of its handler is the same whatever Redis it talks to: the
# worker's round trips on a cluster are in test_worker.py.
pytestmark = pytest.mark.single_node("how the worker treats its handler, whatever Redis it uses")


async def history(client: RedisClient, job_id: str) -> list[dict[str, Any]]:
    return list(json.loads(await client.hget(DINING.job(job_id), "history") or "[]"))


def raising(exception: BaseException) -> Any:
    """A fresh instance each time (an exception object keeps its traceback)."""
    return type(exception)(*exception.args)


@pytest.mark.parametrize(
    ("exception", "error"),
    [
        (asyncio.CancelledError(), "CancelledError"),
        (SystemExit(7), "SystemExit: 7"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (HandlerBaseException("not an Exception"), "HandlerBaseException: not an Exception"),
    ],
    ids=["CancelledError", "SystemExit", "KeyboardInterrupt", "BaseException"],
)
async def test_any_base_exception_a_handler_raises_is_a_failed_attempt(
    queue: JobQueue, redis_client: RedisClient, exception: BaseException, error: str
) -> None:
    calls: list[int] = []

    async def handler(job: JobPayload) -> str:
        if job.task == "poison":
            calls.append(current_job().attempt)
            raise raising(exception)
        return "fine"

    poison, after = make_job(task="poison"), make_job(task="after")
    await queue.enqueue(poison)
    async with running_worker(queue.settings, handler) as worker:
        failed = await eventually(lambda: queue.get_result(poison["job_id"]))
        # The worker survived all three: it still runs the next job.
        await queue.enqueue(after)
        done = await eventually(lambda: queue.get_result(after["job_id"]))
    assert calls == [1, 2, 3]  # not a hot loop: once per attempt, then dead
    assert failed.status == "failed" and failed.error == error
    assert done.ok and done.result == "fine"
    entries = await history(redis_client, poison["job_id"])
    assert [(e["attempt"], e["outcome"], e["error"]) for e in entries] == [
        (1, "error", error),
        (2, "error", error),
        (3, "error", error),
    ]
    assert [e["retry_at"] - e["ended_at"] for e in entries[:2]] == [200, 400]  # the backoff
    assert all(error in e["traceback"] for e in entries)
    assert await redis_client.lrange(DINING.dead, 0, -1) == [poison["job_id"]]
    counters = (await queue.stats("dining")).counters
    assert (counters["started"], counters["retried"], counters["dead_lettered"]) == (4, 2, 1)
    assert (counters["failed"], counters["completed"]) == (1, 1)
    assert worker.counts == {
        "succeeded": 1, "retrying": 2, "dead": 1, "failed": 0, "expired": 0, "released": 0,
        "lost": 0, "cancelled": 0,
    }  # fmt: skip


async def test_a_sync_handler_runs_in_threads_with_its_job_context(queue: JobQueue) -> None:
    # Both jobs must be inside the handler at once to pass the barrier: two threads.
    barrier = threading.Barrier(2, timeout=20)

    def handler(job: JobPayload) -> dict[str, Any]:
        barrier.wait()
        context = current_job()
        return {
            "thread": threading.current_thread().name,
            "job": context.job_id,
            "attempt": context.attempt,
            "left": 0 < context.seconds_left() <= 60,
        }

    jobs = [make_job(), make_job()]
    await queue.enqueue_many(jobs)
    async with running_worker(queue.settings, handler, concurrency=2) as worker:
        results = [await eventually(lambda j=j: queue.get_result(j["job_id"])) for j in jobs]
    assert not worker.handler_is_async
    assert [r.result["job"] for r in results] == [j["job_id"] for j in jobs]
    assert all(r.result["attempt"] == 1 and r.result["left"] for r in results)
    threads = {r.result["thread"] for r in results}
    assert len(threads) == 2 and all(name.startswith("handler-dining-") for name in threads)
    assert threading.current_thread().name not in threads


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_stopping_gives_running_attempts_back_uncounted(
    queue: JobQueue, redis_client: RedisClient, kind: str
) -> None:
    started: list[str] = []
    release_threads = threading.Event()
    never = asyncio.Event()

    async def stuck_async(job: JobPayload) -> None:
        started.append(job.job_id)
        await never.wait()

    def stuck_sync(job: JobPayload) -> None:
        started.append(job.job_id)
        release_threads.wait()

    jobs = [make_job(), make_job()]
    await queue.enqueue_many(jobs)
    settings = queue.settings.with_overrides(shutdown_timeout=0.2)
    handler = stuck_async if kind == "async" else stuck_sync

    async def both_started() -> bool:
        return len(started) == 2

    try:
        async with running_worker(settings, handler) as worker:
            await eventually(both_started)
    finally:
        release_threads.set()
    assert worker.counts["released"] == 2
    assert sum(worker.counts.values()) == 2
    for job in jobs:
        record = await redis_client.hgetall(DINING.job(job["job_id"]))
        assert (record["state"], record["attempts"]) == ("queued", "0")
        assert "history" not in record  # a release is no attempt
    counters = (await queue.stats("dining")).counters
    assert (counters["retried"], counters["failed"], counters["dead_lettered"]) == (0, 0, 0)
    assert (await queue.stats("dining")).queued == 2


async def test_a_loop_blocking_handler_is_named_and_keeps_its_lease(
    queue: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    async def blocking(job: JobPayload) -> int:
        time.sleep(2.5 * queue.settings.lease_seconds)  # noqa: ASYNC251 (the point)
        return current_job().attempt

    job = make_job()
    await queue.enqueue(job)
    caplog.set_level("INFO", logger="platform_common.jobs.worker")
    async with running_worker(queue.settings, blocking) as worker:
        result = await eventually(lambda: queue.get_result(job["job_id"]))
    assert result.ok and result.result == 1
    assert worker.counts["lost"] == 0 and worker.counts["succeeded"] == 1
    assert worker.keeper is not None and worker.keeper.renewals > 0
    named = f"job={job['job_id']} attempt=1/3"
    blocked = [
        r
        for r in caplog.records
        if "event loop blocked" in r.getMessage() and named in r.getMessage()
    ]
    assert [r.levelname for r in blocked] == ["WARNING"]  # one line per stall


# -- worker processes ----------------------------------------------------------------------
MISBEHAVE = "tests.support.queue_handlers:misbehave"
BEHAVE_SYNC = "tests.support.queue_handlers:behave_sync"


def enqueue(redis_url: str, jobs: list[dict[str, Any]]) -> None:
    async def produce() -> None:
        async with await JobQueue.connect(redis_url) as job_queue:
            await job_queue.enqueue_many(jobs)

    asyncio.run(produce())


def test_a_worker_process_survives_system_exit_and_keyboard_interrupt(
    redis_url: str, client: SyncClient, tmp_path: Path
) -> None:
    sleepers = [make_job(constraints=behaviour("sleep", seconds=1.0)) for _ in range(4)]
    exits = make_job(constraints=behaviour("exit"))
    interrupts = make_job(constraints=behaviour("interrupt"))
    # A lease far longer than the sleepers: this test is about SystemExit and
    # KeyboardInterrupt, and on a loaded machine a 1.5 s lease could lapse on its own.
    settings = FAST_SETTINGS | {"QUEUE_LEASE_SECONDS": "20"}
    with WorkerGroup(redis_url, "dining", MISBEHAVE, env=settings) as group:
        worker = group.start(concurrency=6)
        enqueue(redis_url, [*sleepers, exits, interrupts])
        everything = [*sleepers, exits, interrupts]
        wait_until(lambda: all(result(client, job["job_id"]) for job in everything), 60)
        assert worker.alive()
        assert worker.stop() == 0
    for job in sleepers:
        assert result(client, job["job_id"]) == {
            "status": "succeeded", "error": None,
            "result": {"pid": worker.pid, "attempt": 1, "task": job["task"]},
        }  # fmt: skip
        assert runs(client, job["job_id"]) == [(worker.pid, 1)]  # never charged a retry
    for job, error in ((exits, "SystemExit: 7"), (interrupts, "KeyboardInterrupt")):
        assert result(client, job["job_id"]) == {"status": "failed", "result": None, "error": error}
        assert [(h["attempt"], h["error"]) for h in job_history(client, job["job_id"])] == [
            (1, error),
            (2, error),
            (3, error),
        ]
    assert sorted(sync_reply(client.lrange(DINING.dead, 0, -1))) == sorted(
        [exits["job_id"], interrupts["job_id"]]
    )
    assert "attempt failed" in worker.log() and "Traceback" not in worker.log()


def test_a_handler_blocking_the_loop_runs_once_per_attempt_and_keeps_its_lease(
    redis_url: str, client: SyncClient
) -> None:
    # 2.5 leases of blocked loop: without renewal from its own thread the other worker's
    # reaper would take the job and run it again meanwhile.
    lease = float(FAST_SETTINGS["QUEUE_LEASE_SECONDS"])
    job = make_job(constraints=behaviour("block", seconds=2.5 * lease))
    with WorkerGroup(redis_url, "dining", MISBEHAVE, env=FAST_SETTINGS) as group:
        workers = group.start_many(2, concurrency=2)
        enqueue(redis_url, [job])
        done = wait_until(lambda: result(client, job["job_id"]), 60)
        starts = runs(client, job["job_id"])
        assert len(starts) == 1
        ran = next(w for w in workers if w.pid == starts[0][0])
        ran.wait_for_log("event loop blocked for")
    assert done["status"] == "succeeded" and done["result"]["attempt"] == 1
    assert starts == [(ran.pid, 1)]
    assert f"job={job['job_id']} attempt=1/3" in ran.log()
    assert all("lease lost" not in w.log() for w in workers)
    stats = sync_reply(client.hgetall(DINING.stats))
    assert (stats["started"], stats.get("retried", "0"), stats["completed"]) == ("1", "0", "1")


def test_the_cli_runs_a_sync_handler_in_threads_and_stops_despite_a_stuck_one(
    redis_url: str, client: SyncClient
) -> None:
    quick = [make_job(constraints=behaviour("sleep", seconds=0.5)) for _ in range(2)]
    failing = make_job(constraints=behaviour("fail"))
    stuck = make_job(constraints=behaviour("sleep", seconds=600))
    env = {**FAST_SETTINGS, "QUEUE_SHUTDOWN_TIMEOUT": "0.5"}
    with WorkerGroup(redis_url, "dining", BEHAVE_SYNC, env=env) as group:
        worker = group.start(concurrency=3)
        enqueue(redis_url, [*quick, failing])
        for job in (*quick, failing):
            wait_until(lambda job=job: result(client, job["job_id"]), 60)
        enqueue(redis_url, [stuck])
        wait_until(lambda: runs(client, stuck["job_id"]))
        # Its thread sleeps on; a daemon thread does not keep the process from exiting.
        assert worker.stop(timeout=60) == 0
    for job in quick:
        done = result(client, job["job_id"])
        assert done is not None and done["status"] == "succeeded"
        assert done["result"]["thread"].startswith("handler-dining-")
    assert result(client, failing["job_id"]) == {
        "status": "failed", "result": None, "error": "RuntimeError: boom on attempt 3",
    }  # fmt: skip
    record = sync_reply(client.hgetall(DINING.job(stuck["job_id"])))
    assert (record["state"], record["attempts"]) == ("queued", "0")  # given back, uncounted
    assert "sync (threads)" in worker.log()
