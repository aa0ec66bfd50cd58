"""Handlers for benchmarks that platform_common.jobs.queue.builtin does not ship."""

from __future__ import annotations

from platform_common.jobs.queue import JobPayload

__all__ = ["BenchFailure", "always_fails"]


class BenchFailure(Exception):
    """Raised on purpose: every attempt of a job run by `always_fails` ends in it."""


async def always_fails(job: JobPayload) -> None:
    """Fails every attempt, so jobs enqueued with max_attempts 1 are dead-lettered at once
    (what bench.cost measures the memory of)."""
    raise BenchFailure(f"bench: job {job.job_id} fails on purpose")
