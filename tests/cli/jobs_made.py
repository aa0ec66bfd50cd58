"""Jobs made through the real queue for the operator commands to show: enqueued, dead-
lettered by a worker's failed attempt, or failed for good."""

from __future__ import annotations

import asyncio
from typing import Any

from platform_common.jobs.queue import JobPayload, JobQueue
from tests.support.dead_letter_race import make_failed_jobs
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

__all__ = ["cannot_book", "dead_letters", "enqueue", "failed_jobs"]


async def cannot_book(job: JobPayload) -> None:
    raise RuntimeError(f"cannot book {job.task}")


async def _dead_count(queue: JobQueue, count: int) -> bool:
    return await queue.dead_letters.count("dining") >= count


def dead_letters(redis_url: str, tasks: list[str]) -> list[str]:
    """Enqueue a job per task and let a worker fail each on its one attempt."""

    async def make() -> list[str]:
        async with await JobQueue.connect(fast_settings(redis_url, max_attempts=1)) as queue:
            before = await queue.dead_letters.count("dining")
            ids = await queue.enqueue_many([make_job(task=task) for task in tasks])
            async with running_worker(queue.settings, cannot_book, concurrency=20):
                await eventually(lambda: _dead_count(queue, before + len(ids)))
        return ids

    return asyncio.run(make())


def failed_jobs(redis_url: str, errors: list[str]) -> list[str]:
    """Enqueue a job per error text and let a worker fail each for good (NonRetryableError)."""

    async def make() -> list[str]:
        async with await JobQueue.connect(fast_settings(redis_url)) as queue:
            return await make_failed_jobs(queue, errors)

    return asyncio.run(make())


def enqueue(redis_url: str, count: int, **fields: Any) -> list[str]:
    async def make() -> list[str]:
        async with await JobQueue.connect(fast_settings(redis_url)) as queue:
            return await queue.enqueue_many([make_job(**fields) for _ in range(count)])

    return asyncio.run(make())
