"""What a handler sees: its signature, the running job's context, and how to refuse a job."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .payload import JobPayload

if TYPE_CHECKING:  # the worker builds it; at run time queue/ never imports worker/
    from ..worker.progress_reporter import ProgressReporter

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

    progress_reporter: ProgressReporter | None = field(default=None, repr=False, compare=False)
    """What stores this attempt's progress reports (the worker's); None outside a worker."""

    def seconds_left(self) -> float:
        """Seconds until the handler is cancelled for the job's TTL (0 when past it)."""
        return max(self.deadline - time.monotonic(), 0.0)

    async def report_progress(self, data: Mapping[str, Any]) -> None:
        """Report how far the job got (an `async def` handler): `data`, a JSON object of
        at most QUEUE_MAX_PROGRESS_BYTES encoded, becomes the job's last progress
        (JobQueue.progress) and an event (JobQueue.progress_events). At most one report
        per QUEUE_PROGRESS_INTERVAL is stored: a sooner one is held and stored when the
        interval has passed (the last one wins), so returning does not mean stored yet.
        InvalidProgress for data that is not such an object (nothing stored); LeaseLost
        once the lease is lost or the attempt ended (stop working on the job)."""
        await self._reporter().report(data)

    def report_progress_sync(self, data: Mapping[str, Any]) -> None:
        """report_progress for a plain `def` handler (run in a worker thread): blocks the
        thread until the report is stored or held. Raises as report_progress does, and
        RuntimeError when called on the event loop."""
        self._reporter().report_sync(data)

    def _reporter(self) -> ProgressReporter:
        if self.progress_reporter is None:
            raise RuntimeError(f"job {self.job_id!r}: no worker runs this context")
        return self.progress_reporter


_current: ContextVar[JobContext] = ContextVar("platform_common_jobs_current_job")


def current_job() -> JobContext:
    """The context of the job the calling handler runs (LookupError outside a handler)."""
    return _current.get()


def set_current_job(context: JobContext) -> None:
    _current.set(context)
