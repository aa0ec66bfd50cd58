"""Handlers for benchmarks that platform_common.jobs.queue.builtin does not ship."""

from __future__ import annotations

import asyncio
import os
import time

import redis.asyncio as aioredis

from platform_common.jobs.queue import JobPayload

__all__ = [
    "CANCEL_SEEN_KEY",
    "NAP_MS_VARIABLE",
    "NAP_SECONDS",
    "BenchFailure",
    "always_fails",
    "naps",
    "naps_for",
    "waits",
]

CANCEL_SEEN_KEY = "bench:cancel:seen"
"""Hash: job id -> the wall-clock time (s) its handler saw its cancel (bench.cancel)."""
CANCEL_STARTED_KEY = "bench:cancel:started"
"""Set: the ids of jobs whose handler runs (bench.cancel waits for them all)."""
_client: aioredis.Redis | None = None

NAP_SECONDS = 0.02
"""How long `naps` takes: workers stay busy while a backlog waits."""
NAP_MS_VARIABLE = "BENCH_NAP_MS"
"""The worker process's environment variable `naps_for` reads: milliseconds per job."""


class BenchFailure(Exception):
    """Raised on purpose: every attempt of a job run by `always_fails` ends in it."""


async def always_fails(job: JobPayload) -> None:
    """Fails every attempt, so jobs enqueued with max_attempts 1 are dead-lettered at once
    (what bench.cost measures the memory of)."""
    raise BenchFailure(f"bench: job {job.job_id} fails on purpose")


async def naps(job: JobPayload) -> None:
    """Takes NAP_SECONDS, doing nothing (bench.pause: jobs run while it pauses)."""
    await asyncio.sleep(NAP_SECONDS)


async def naps_for(job: JobPayload) -> None:
    """Takes NAP_MS_VARIABLE's milliseconds (the bench sets it in the worker's
    environment: bench.fairness --handler-ms), doing nothing."""
    await asyncio.sleep(float(os.environ[NAP_MS_VARIABLE]) / 1000)


async def waits(job: JobPayload) -> None:
    """Runs until cancelled (bench.cancel): says it started, then, when its task is
    cancelled, notes the time in CANCEL_SEEN_KEY (QUEUE_REDIS_URL's Redis)."""
    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["QUEUE_REDIS_URL"])
    await _client.sadd(CANCEL_STARTED_KEY, job.job_id)  # type: ignore[misc]
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        seen = time.time()
        noted = _client.hset(CANCEL_SEEN_KEY, job.job_id, repr(seen))
        await asyncio.shield(noted)  # type: ignore[arg-type]
        raise
