"""What a handler sees: its signature, the running job's context, and how to refuse a job."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .payload import JobPayload

__all__ = [
    "AsyncHandler",
    "Handler",
    "JobContext",
    "NonRetryableError",
    "SyncHandler",
    "current_job",
]

AsyncHandler = Callable[[JobPayload], Awaitable[Any]]
"""An `async def` handler: runs on the worker's event loop, so it must not block it."""
SyncHandler = Callable[[JobPayload], Any]
"""A plain `def` handler: runs in one of the worker's threads (as many as its concurrency),
so it may block (HTTP clients, SDKs, CPU work that releases the GIL)."""
Handler = AsyncHandler | SyncHandler
"""An agent's job function: gets the payload, returns a JSON-serialisable result.
Raising anything (any BaseException) retries the job with backoff until its last
attempt, then dead-letters it."""


class NonRetryableError(Exception):
    """Raise from a handler when trying again cannot help (e.g. a malformed task): the
    job fails at once, is counted in `failed`, and is not dead-lettered."""


@dataclass(frozen=True, slots=True)
class JobContext:
    """The attempt a handler is running, readable through `current_job()`."""

    job_id: str
    agent_type: str
    attempt: int
    """1 for the first attempt; attempts cut short by a crash count too."""
    max_attempts: int
    expires_at: float
    """The job's TTL deadline, seconds since the epoch by Redis's clock (the handler is
    cancelled then). To know the time left, use `seconds_left()`: this machine's wall
    clock may disagree with Redis's."""
    worker_id: str
    deadline: float = math.inf
    """`expires_at` on this process's monotonic clock (time.monotonic), measured from
    the Redis TIME of the claim."""
    cancel_requested: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set when the job is cancelled while it runs (JobQueue.cancel): an async handler's
    task is cancelled then; a sync handler, which cannot be, checks this (or waits on
    it) and should return soon. Whatever it returns is not stored: the job ends
    cancelled."""

    def seconds_left(self) -> float:
        """Seconds until the handler is cancelled for the job's TTL (0 when past it)."""
        return max(self.deadline - time.monotonic(), 0.0)


_current: ContextVar[JobContext] = ContextVar("platform_common_jobs_current_job")


def current_job() -> JobContext:
    """The context of the job the calling handler runs (LookupError outside a handler)."""
    return _current.get()


def set_current_job(context: JobContext) -> None:
    _current.set(context)
