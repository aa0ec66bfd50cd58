"""In-process helpers for queue tests: fast settings, a running Worker, polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from platform_common.jobs.queue import JobPayload, QueueSettings, current_job
from platform_common.jobs.queue.context import Handler
from platform_common.jobs.worker import Worker

__all__ = ["RanJobs", "eventually", "fast_settings", "running_worker"]

T = TypeVar("T")


def fast_settings(redis_url: str, **overrides: Any) -> QueueSettings:
    """Short lease, reaper, backoff and poll intervals so recovery paths take ~1 s."""
    values: dict[str, Any] = {
        "lease_seconds": 1.0,
        "reaper_interval": 0.1,
        "promote_interval": 0.05,
        "heartbeat_interval": 0.2,
        "block_timeout": 0.2,
        "cleanup_interval": 0.2,
        "backoff_base": 0.2,
        "shutdown_timeout": 2.0,
        "pool_min": 2,
    }
    values.update(overrides)
    return QueueSettings.from_url(redis_url, **values)


async def eventually(
    probe: Callable[[], Awaitable[T | None]], within: float = 20.0, interval: float = 0.02
) -> T:
    """Await `probe()` until it returns something truthy, and return that (never None);
    AssertionError at the deadline."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {within}s: {probe}")
        await asyncio.sleep(interval)


@asynccontextmanager
async def running_worker(
    settings: QueueSettings, handler: Handler, *, agent_type: str = "dining", concurrency: int = 4
) -> AsyncIterator[Worker]:
    """A Worker running in this event loop; stopped gracefully on exit."""
    worker = Worker(settings, agent_type, handler, concurrency=concurrency)
    task = asyncio.create_task(worker.run())
    ready = asyncio.create_task(worker.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # raises what stopped it
    try:
        yield worker
    finally:
        worker.stop()
        await task


class RanJobs:
    """A handler that records the job id of every attempt it ran, in order."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, job: JobPayload) -> str:
        self.ran.append(current_job().job_id)
        return "ok"
