"""What a handler sees: its signature, the running job's context, and how to refuse a job."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .payload import JobPayload

__all__ = ["Handler", "JobContext", "NonRetryableError", "current_job"]

Handler = Callable[[JobPayload], Awaitable[Any]]
"""An agent's job function: gets the payload, returns a JSON-serialisable result.
Raising retries the job (with backoff) until its last attempt, then dead-letters it."""


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
    """The job's TTL deadline, seconds since the epoch; the handler is cancelled then."""
    worker_id: str


_current: ContextVar[JobContext] = ContextVar("platform_common_jobs_current_job")


def current_job() -> JobContext:
    """The context of the job the calling handler runs (LookupError outside a handler)."""
    return _current.get()


def set_current_job(context: JobContext) -> None:
    _current.set(context)
