"""JobStatus, the one status vocabulary, and the transitions the store allows."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIVE", "TERMINAL", "JobStatus", "transition_allowed"]


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE: frozenset[JobStatus] = frozenset({JobStatus.PENDING, JobStatus.RUNNING})
TERMINAL: frozenset[JobStatus] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
)


def transition_allowed(current: JobStatus, requested: JobStatus) -> bool:
    """A terminal job never becomes active again; every other move (and staying put) is allowed.

    Terminal -> other terminal is refused too: a job reaches exactly one outcome.
    """
    if current in TERMINAL:
        return requested == current
    return True
