"""Enqueueing into a Redis at maxmemory under `noeviction`: every enqueue script is all or
nothing (Redis refuses a script's first write at maxmemory, so a refused script wrote
nothing), and the error says which job ids were written, so a caller retries only the
rest. Each test starts its own small redis-server (its memory limit is set per test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from platform_common.jobs.errors import BackendOutOfMemory, BackendUnavailable
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.queue.producer import ENQUEUE_CHUNK
from tests.support.keyspace import snapshot
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer
from tests.support.stored_jobs import stored_fields

DINING = QueueKeys("dining")
CHUNKS = 4
pytestmark = pytest.mark.queue(defaults=True, register=("dining",))


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(extra_args=["--maxmemory-policy", "noeviction"]) as running:
        yield running


@pytest.fixture
def redis_url(server: RedisServer) -> str:
    """This test's own server: `queue` and `redis_client` follow it."""
    return server.url


def jobs(count: int) -> list[dict[str, Any]]:
    return [make_job(task="x" * 600) for _ in range(count)]


async def used_memory(redis_client: aioredis.Redis) -> int:
    return int((await redis_client.info("memory"))["used_memory"])


async def chunk_cost(redis_client: aioredis.Redis, queue: JobQueue) -> int:
    """What one full chunk of jobs() adds to used_memory (measured, then flushed)."""
    before = await used_memory(redis_client)
    await queue.enqueue_many(jobs(ENQUEUE_CHUNK))
    cost = await used_memory(redis_client) - before
    await redis_client.flushall()
    queue.connection.registered_types.clear()
    await queue.connection.register_type("dining")
    return cost


async def written_ids(redis_client: aioredis.Redis) -> set[str]:
    return set(await redis_client.lrange(DINING.queue, 0, -1))


async def test_enqueue_many_at_maxmemory_lists_the_ids_written_and_not(
    redis_client: aioredis.Redis, queue: JobQueue
) -> None:
    cost = await chunk_cost(redis_client, queue)
    batch = jobs(CHUNKS * ENQUEUE_CHUNK)
    ids = [job["job_id"] for job in batch]
    # How much of a pipelined batch fits depends on how much of it sits in Redis' input
    # buffer at once: raise the limit half a chunk at a time until the batch is cut.
    for half_chunks in range(2, 2 * CHUNKS):
        await redis_client.config_set(
            "maxmemory", await used_memory(redis_client) + half_chunks * cost // 2
        )
        with pytest.raises(BackendOutOfMemory) as info:
            await queue.enqueue_many(batch)
        error = info.value
        assert isinstance(error, BackendUnavailable)
        assert error.written + error.not_written == ids  # each id once, in batch order
        assert len(error.written) % ENQUEUE_CHUNK == 0  # whole chunks only
        assert await written_ids(redis_client) == set(error.written)
        stored = [bool(await stored_fields(redis_client, DINING, job_id)) for job_id in ids]
        assert stored == [True] * len(error.written) + [False] * len(error.not_written)
        assert await redis_client.hget(DINING.stats, "enqueued") == str(len(error.written))
        if error.written:
            break
        await redis_client.config_set("maxmemory", 0)
    else:
        pytest.fail("no limit cut the batch after a written chunk")
    assert f"{len(error.written)} job(s) written" in str(error)

    # The caller retries exactly what was not written, once memory is there again.
    await redis_client.config_set("maxmemory", 0)
    retry = [job for job in batch if job["job_id"] in set(error.not_written)]
    assert await queue.enqueue_many(retry) == error.not_written
    assert await written_ids(redis_client) == set(ids)
    assert await redis_client.llen(DINING.queue) == len(ids)
    assert await redis_client.hget(DINING.stats, "enqueued") == str(len(ids))


async def test_enqueue_at_maxmemory_refuses_and_writes_nothing(
    redis_client: aioredis.Redis, queue: JobQueue, server: RedisServer
) -> None:
    await queue.enqueue(make_job())
    await redis_client.config_set(
        "maxmemory", await used_memory(redis_client) // 2
    )  # already past it
    raw_bytes = aioredis.Redis.from_url(server.url)
    try:
        before = await snapshot(raw_bytes)
        with pytest.raises(BackendOutOfMemory) as info:
            await queue.enqueue(make_job())
        assert (info.value.written, info.value.not_written) == ([], [])
        assert "maxmemory" in str(info.value)
        with pytest.raises(BackendOutOfMemory):
            await queue.enqueue_many(jobs(3))
        # A new producer registers its agent type first: refused the same way.
        async with await JobQueue.connect(server.url) as fresh:
            with pytest.raises(BackendOutOfMemory):
                await fresh.enqueue(make_job())
        assert await snapshot(raw_bytes) == before
    finally:
        await raw_bytes.aclose()
