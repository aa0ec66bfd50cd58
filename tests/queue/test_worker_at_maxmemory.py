"""A worker started while Redis is at maxmemory (noeviction) waits, logging the condition
once, and starts working when memory is freed, instead of exiting at its first write."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer
from tests.support.workers import FAST_SETTINGS, WorkerGroup, wait_until

FILLER = "filler:"
OUT_OF_MEMORY = "is out of memory"
WRITES_AGAIN = "accepts writes again"


@pytest.fixture
def full_redis() -> Iterator[tuple[RedisServer, redis.Redis]]:
    server = RedisServer(extra_args=["--maxmemory-policy", "noeviction"]).start()
    client = redis.Redis(port=server.port, decode_responses=True)
    try:
        yield server, client
    finally:
        client.close()
        server.cleanup()


def fill(client: redis.Redis) -> int:
    """Cap memory a little above what Redis uses now, then write filler keys until a
    write on its own is refused with OOM (a pipeline's buffers, freed after it, can take
    memory over the limit for a moment only); the number of keys written."""
    memory: dict[str, Any] = client.info("memory")  # type: ignore[assignment]
    used = int(memory["used_memory"])
    client.config_set("maxmemory", used + 2 * 1024 * 1024)
    written = 0
    while True:
        pipe = client.pipeline(transaction=False)
        for index in range(written, written + 50):
            pipe.set(f"{FILLER}{index}", "x" * 1_000)
        replies = pipe.execute(raise_on_error=False)
        written += sum(1 for reply in replies if not isinstance(reply, redis.OutOfMemoryError))
        try:
            client.set(f"{FILLER}{written}", "x")
        except redis.OutOfMemoryError:
            return written
        written += 1


def oom_refusals(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("errorstats")  # type: ignore[assignment]
    return int(stats.get("errorstat_OOM", {}).get("count", 0))


def test_worker_waits_out_maxmemory_then_runs_the_job(
    full_redis: tuple[RedisServer, redis.Redis],
) -> None:
    server, client = full_redis
    job = make_job("dining")
    keys = QueueKeys("dining")

    async def enqueue() -> None:
        async with await JobQueue.connect(server.url) as queue:
            await queue.enqueue(job)

    asyncio.run(enqueue())
    written = fill(client)
    assert written > 0
    with pytest.raises(redis.OutOfMemoryError):
        client.sadd("any:set", "refused")  # Redis is full: writes are refused

    with WorkerGroup(
        server.url, "dining", "tests.support.queue_handlers:behave", env=FAST_SETTINGS
    ) as group:
        worker = group.start(wait_ready=False)
        worker.wait_for_log(OUT_OF_MEMORY)
        # Still up, and still trying: Redis keeps refusing its writes.
        seen = oom_refusals(client)
        wait_until(lambda: oom_refusals(client) >= seen + 2 or not worker.alive(), timeout=30)
        assert worker.alive(), worker.log()
        assert "worker ready" not in worker.log()
        assert client.lrange(keys.queue, 0, -1) == [job["job_id"]]  # not taken yet

        client.delete(*[f"{FILLER}{index}" for index in range(written)])
        worker.wait_for_log("worker ready")
        wait_until(lambda: client.get(keys.result(job["job_id"])), timeout=30)
        assert worker.alive()
        log = worker.log()
    assert log.count(OUT_OF_MEMORY) == 1, log
    assert log.count(WRITES_AGAIN) == 1, log
    assert log.index(OUT_OF_MEMORY) < log.index(WRITES_AGAIN) < log.index("worker ready")
