"""Durability: with AOF `appendfsync always`, an enqueue that returned survives a
kill -9 of redis-server. Enqueues run concurrently and the server is killed while some
are still in flight: those may or may not have landed, every acknowledged one must."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from platform_common.jobs.errors import BackendUnavailable
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.redis_server import RedisServer

AGENT_TYPES = ("dining", "flights")
SEED = int(os.environ.get("DURABILITY_SEED", random.randrange(1 << 30)))


@pytest.fixture
def aof_server() -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True, appendfsync="always").start()
    try:
        yield server
    finally:
        server.cleanup()


def job(number: int, agent_type: str) -> dict[str, object]:
    return {
        "job_id": f"durable-{number}",
        "session_id": "session-1",
        "orchestrator_id": "orch-1",
        "agent_type": agent_type,
        "task": "find a table for two",
        "created_at": datetime.now(UTC).isoformat(),
        "result_format": "RestaurantOption[]",
        "ttl_seconds": 3600,
    }


async def test_acknowledged_enqueues_survive_kill_9(aof_server: RedisServer) -> None:
    print(f"durability seed {SEED} (replay: DURABILITY_SEED={SEED})")
    rng = random.Random(SEED)
    kill_after = rng.randrange(150, 350)
    settings = QueueSettings.from_url(aof_server.url, agent_types=AGENT_TYPES, pool_min=1)
    queue = await JobQueue.connect(settings)
    acknowledged: list[tuple[str, str]] = []
    failed_in_flight = 0
    numbers = iter(range(10_000))
    killed = asyncio.Event()

    async def enqueue_until_killed() -> None:
        nonlocal failed_in_flight
        for number in numbers:
            agent_type = rng.choice(AGENT_TYPES)
            try:
                job_id = await queue.enqueue(job(number, agent_type))
            except BackendUnavailable:
                # Only after the kill may an enqueue fail; it was never acknowledged.
                assert killed.is_set()
                failed_in_flight += 1
                return
            acknowledged.append((agent_type, job_id))
            if len(acknowledged) == kill_after:
                aof_server.kill()  # SIGKILL: no shutdown, no final fsync
                killed.set()

    try:
        await asyncio.gather(*(enqueue_until_killed() for _ in range(8)))
    finally:
        await queue.aclose()
    assert killed.is_set()
    assert len(acknowledged) >= kill_after
    print(f"killed after {len(acknowledged)} acknowledged, {failed_in_flight} in flight")

    aof_server.start()  # same directory: replays the AOF
    client = aioredis.Redis.from_url(aof_server.url, decode_responses=True)
    try:
        missing = []
        for agent_type, job_id in acknowledged:
            keys = QueueKeys(agent_type)
            # A waiting job is one field of the queued hash (queue/envelope.py).
            if not await client.hexists(keys.queued, job_id):
                missing.append(job_id)
        assert missing == [], f"acknowledged but lost after kill -9: {missing[:10]}"
        queued: set[str] = set()
        enqueued_counter = 0
        for agent_type in AGENT_TYPES:
            keys = QueueKeys(agent_type)
            queued |= set(await client.lrange(keys.queue, 0, -1))
            enqueued_counter += int(await client.hget(keys.stats, "enqueued") or 0)
        assert {job_id for _, job_id in acknowledged} <= queued
        # Counters are written in the same script as the job: never behind the data.
        assert enqueued_counter == len(queued)
    finally:
        await client.aclose()
