"""Handlers for benchmarks that platform_common.jobs.queue.builtin does not ship."""

from __future__ import annotations

import asyncio

from platform_common.jobs.queue import JobPayload

__all__ = ["NAP_SECONDS", "BenchFailure", "always_fails", "naps"]

NAP_SECONDS = 0.02
"""How long `naps` takes: workers stay busy while a backlog waits."""


class BenchFailure(Exception):
    """Raised on purpose: every attempt of a job run by `always_fails` ends in it."""


async def always_fails(job: JobPayload) -> None:
    """Fails every attempt, so jobs enqueued with max_attempts 1 are dead-lettered at once
    (what bench.cost measures the memory of)."""
    raise BenchFailure(f"bench: job {job.job_id} fails on purpose")


async def naps(job: JobPayload) -> None:
    """Takes NAP_SECONDS, doing nothing (bench.pause: jobs run while it pauses)."""
    await asyncio.sleep(NAP_SECONDS)
