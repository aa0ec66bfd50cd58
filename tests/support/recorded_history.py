"""Samples of the per-minute history (keys.py `history`) written as the workers write
them (the history script, at explicit minutes), in the minute of Redis' clock a test
then reads them in."""

from __future__ import annotations

import asyncio
import time

from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import Chores

__all__ = ["MINUTE", "record", "this_minute"]

MINUTE = 60_000


async def this_minute(raw: RedisClient) -> int:
    """The start (ms) of Redis' current minute, once at least 5 s of it remain (polled:
    a test reads the samples back in the minute it recorded them for)."""
    deadline = time.monotonic() + 10
    while True:
        seconds, micros = await raw.time()
        now = int(seconds) * 1000 + int(micros) // 1000
        if now % MINUTE < MINUTE - 5_000:
            return now - now % MINUTE
        assert time.monotonic() < deadline, "Redis' clock does not move"
        await asyncio.sleep(0.2)


async def record(
    queue: JobQueue, raw: RedisClient, agent_type: str, minute_ms: int, **counters: int
) -> None:
    """The counters as they stood at `minute_ms` (others as they are), sampled there by
    the history script."""
    await raw.hset(queue.connection.keys(agent_type).stats, mapping=counters)
    step = await Chores(queue.connection, agent_type).record_history(now_ms=minute_ms + 100)
    assert step.wrote
