"""A job running under a lease with a stored progress report, as a worker leaves it
while its handler runs (for the pages and commands that show the report)."""

from __future__ import annotations

import json
from typing import Any

from platform_common.jobs.queue import JobQueue
from platform_common.jobs.worker import AttemptCalls
from platform_common.jobs.worker.progress_reporter import store_progress
from tests.support.queue_handlers import make_job

__all__ = ["reporting_job"]


async def reporting_job(queue: JobQueue, report: dict[str, Any]) -> tuple[str, int]:
    """Enqueue a `dining` job, take it (token "t-progress") and store `report` as its
    progress: its id and the report's Redis time (ms)."""
    job_id: str = await queue.enqueue(make_job())
    calls = AttemptCalls(queue.connection, "dining")
    _, claims = await calls.take("worker-progress", ["t-progress"])
    assert [claim.job_id for claim in claims] == [job_id]
    encoded = json.dumps(report)
    return job_id, await store_progress(queue.connection, calls.keys, job_id, "t-progress", encoded)
