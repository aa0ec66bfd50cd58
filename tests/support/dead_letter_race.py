"""Dead letters (and failed jobs) made by a real worker, and what happens to the list
between the count an operator is shown and their confirmation: some of the shown letters
are requeued (and fail again: dead letters once more, but new ones) and new jobs are
dead-lettered."""

from __future__ import annotations

from typing import Any

from platform_common.jobs.queue import JobPayload, JobQueue, NonRetryableError
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker

__all__ = ["fail_with_error_text", "make_dead_letters", "make_failed_jobs", "meanwhile"]


async def fail_with_error_text(job: JobPayload) -> None:
    raise RuntimeError(job.constraints.get("error", "cannot book"))


async def refuse_with_error_text(job: JobPayload) -> None:
    raise NonRetryableError(job.constraints.get("error", "cannot book"))


async def make_failed_jobs(queue: JobQueue, errors: list[str], **job: Any) -> list[str]:
    """One job failed for good per error text (a real worker's handler raises
    NonRetryableError on its first attempt). Returns their ids."""
    before = await queue.failed_jobs.count("dining")
    ids = await queue.enqueue_many([make_job(constraints={"error": e}, **job) for e in errors])

    async def all_failed() -> bool:
        return await queue.failed_jobs.count("dining") == before + len(ids)

    async with running_worker(queue.settings, refuse_with_error_text, concurrency=8):
        await eventually(all_failed)
    return ids


async def make_dead_letters(queue: JobQueue, errors: list[str], **job: Any) -> list[str]:
    """One dead letter per error text (a real worker fails each on its one attempt: the
    queue's settings must give one). Returns their ids."""
    return await _fail(queue, errors, 0, **job)


async def meanwhile(queue: JobQueue, requeued: list[str], errors: list[str]) -> list[str]:
    """What happens after the count was shown: `requeued` (shown letters) go back on the
    queue, then a worker fails them again along with one new job per error text, so
    every one of them is dead-lettered after the count. Returns the new jobs' ids."""
    assert await queue.dead_letters.requeue("dining", requeued) == requeued
    return await _fail(queue, errors, len(requeued))


async def _fail(queue: JobQueue, errors: list[str], waiting: int, **job: Any) -> list[str]:
    before = await queue.dead_letters.count("dining")
    ids = await queue.enqueue_many([make_job(constraints={"error": e}, **job) for e in errors])

    async def all_dead() -> bool:
        return await queue.dead_letters.count("dining") == before + waiting + len(ids)

    async with running_worker(queue.settings, fail_with_error_text, concurrency=8):
        await eventually(all_dead)
    return ids
