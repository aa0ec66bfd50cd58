"""Sentinel: the JobStore, the queue's workers and the exporter on a
`redis+sentinel://` URL, across a planned switchover and a killed master (a real master,
replica and three redis-sentinel processes)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import RedisError

from platform_common.jobs import JobStatus, make_job_store
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_sentinel import RedisSentinelGroup

# After a killed master, redis-py's sentinel-managed pool can drop a Connection to the
# dead server without closing its socket (seen ~1 run in 6); the socket goes with the
# object. That ResourceWarning is redis-py's, not ours: ignore it here, and collect
# garbage at the end of each test so it is never attributed to a later test.
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

RECOVERY_DEADLINE = 60.0
"""Seconds the jobs may take after a failover: a hang detector, not a speed target."""


@pytest.fixture(scope="module")
def sentinels() -> Iterator[RedisSentinelGroup]:
    group = RedisSentinelGroup().start()
    try:
        yield group
    finally:
        group.cleanup()


@pytest.fixture(autouse=True)
def _collect_leaked_connections() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture
def sentinel_url(sentinels: RedisSentinelGroup) -> str:
    sentinels.wait_ready()
    sentinels.master().cli("FLUSHALL")
    return sentinels.url


async def test_job_store_carries_on_across_a_planned_switchover(
    sentinels: RedisSentinelGroup, sentinel_url: str
) -> None:
    store = make_job_store(sentinel_url, agent="sentinel-agent")
    try:
        await store.create("before", {"n": 1}, ttl_seconds=300)
        old = sentinels.master().port
        new = await asyncio.to_thread(sentinels.failover)
        assert new.port != old
        # The same store, no restart and no retry by the caller: its connection to the
        # demoted master fails (READONLY) and its own retry asks the sentinels again.
        updated = await store.update("before", status=JobStatus.RUNNING)
        assert updated.version == 2
        await store.create("after", ttl_seconds=300)
        assert sorted(await store.list_ids()) == ["after", "before"]
    finally:
        await store.close()
    assert "role:master" in new.cli("INFO", "replication")


async def test_workers_carry_on_when_the_master_is_killed(
    sentinels: RedisSentinelGroup, sentinel_url: str
) -> None:
    settings = fast_settings(sentinel_url)
    gate = asyncio.Event()

    async def gated(job: JobPayload) -> dict[str, str]:
        await gate.wait()
        return {"echo": job.job_id}

    before = [make_job(task=f"before {i}") for i in range(6)]
    after = [make_job(task=f"after {i}") for i in range(6)]
    killed = sentinels.master()
    try:
        async with contextlib.AsyncExitStack() as stack:
            queue = await JobQueue.connect(settings)
            stack.push_async_callback(queue.aclose)
            await stack.enter_async_context(running_worker(settings, gated, concurrency=3))
            await queue.enqueue_many(before)

            async def running() -> bool:
                return (await queue.stats("dining")).in_progress > 0

            await eventually(running)
            await asyncio.to_thread(sentinels.wait_replicated)
            started = time.monotonic()
            await asyncio.to_thread(sentinels.kill_master)
            gate.set()
            for job in after:
                await _retrying(lambda job=job: queue.enqueue(job))

            async def all_done() -> bool:
                for job in before + after:
                    with contextlib.suppress(RedisError, OSError):
                        if await queue.get_result(job["job_id"], "dining") is not None:
                            continue
                    return False
                return True

            await eventually(all_done, within=RECOVERY_DEADLINE, interval=0.1)
            stats = await queue.stats("dining")
            assert stats.counters["enqueued"] == stats.counters["completed"] == 12
            assert (stats.queued, stats.in_progress, stats.delayed) == (0, 0, 0)
            print(f"\nsentinel failover: every job done {time.monotonic() - started:.1f}s after")

            exporter = Exporter(ExporterSettings.from_args(["--redis-url", sentinel_url]))
            try:
                result = await exporter.scrape()
            finally:
                await exporter.aclose()
            assert result.snapshot is not None
            [dining] = [t for t in result.snapshot.types if t.agent_type == "dining"]
            assert dining.counters["completed"] == 12
    finally:
        await asyncio.to_thread(sentinels.restart_old_master, killed)


async def _retrying(operation: object) -> object:
    """Run `operation()` until it stops failing with a connection error (the sentinels
    are still promoting); other errors propagate."""
    for _ in range(300):
        try:
            return await operation()  # type: ignore[operator]
        except (RedisError, OSError):
            await asyncio.sleep(0.1)
    raise AssertionError("Redis never came back")
