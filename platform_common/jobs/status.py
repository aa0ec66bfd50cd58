"""The job vocabularies, in one place: str enums (JSON and Redis hold the plain strings),
with derived frozensets instead of tuples of strings at the call sites. The Lua scripts
write and compare exactly QueueState's strings (tests/queue/test_status.py holds them to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "ACTIVE",
    "JOB_STATUS_OF",
    "QUEUE_ACTIVE",
    "QUEUE_TERMINAL",
    "RESULT_STATES",
    "TERMINAL",
    "AttemptOutcome",
    "JobStatus",
    "QueueState",
    "transition_allowed",
]


class JobStatus(StrEnum):
    """A JobStore record's status."""

    PENDING = "pending"
    """Created, not started."""
    RUNNING = "running"
    """Being worked on."""
    SUCCEEDED = "succeeded"
    """Finished with a result."""
    FAILED = "failed"
    """Finished without one (the error says why)."""
    CANCELLED = "cancelled"
    """Stopped on request before it finished."""


ACTIVE: frozenset[JobStatus] = frozenset({JobStatus.PENDING, JobStatus.RUNNING})
TERMINAL: frozenset[JobStatus] = frozenset(JobStatus) - ACTIVE


def transition_allowed(current: JobStatus, requested: JobStatus) -> bool:
    """A terminal job never moves again, not even to another terminal status (a job
    reaches exactly one outcome); every other move (and staying put) is allowed."""
    if current in TERMINAL:
        return requested == current
    return True


class QueueState(StrEnum):
    """Where a queue job is: the `state` field of its hash `jobs:{type}:job:<id>`.

    EXPIRED is the one exception: expiry deletes the record, so only the job's result
    (`JobResult.status`) says so. A hash without a `state` field is QUEUED: enqueue's hot
    path does not write one.

    FAILED and DEAD jobs are kept for an operator, each on its own list
    (`queue.failed_jobs`, `queue.dead_letters`): record and result for
    QUEUE_DEAD_LETTER_RETENTION (or the job's TTL if longer), at most
    QUEUE_DEAD_LETTER_MAX per list, unless requeued or purged first.
    """

    QUEUED = "queued"
    """Waiting on the queue list: never attempted, released, or a dead letter requeued."""
    RUNNING = "running"
    """An attempt runs under a lease, fenced by the claiming worker's token."""
    RETRYING = "retrying"
    """An attempt failed, another is due: delayed for its backoff, then on the queue list."""
    SUCCEEDED = "succeeded"
    """Finished: the handler's result is stored."""
    FAILED = "failed"
    """Failed for good (NonRetryableError): kept on the failed list for the retention."""
    DEAD = "dead"
    """Used its last attempt: kept on the dead-letter list for the retention."""
    EXPIRED = "expired"
    """Its TTL passed before it finished: the record is gone, only its result remains."""
    CANCELLED = "cancelled"
    """Cancelled on request (queue/cancel.py); its result's error is the reason."""


QUEUE_ACTIVE: frozenset[QueueState] = frozenset(
    {QueueState.QUEUED, QueueState.RUNNING, QueueState.RETRYING}
)
"""States a worker may still move on: their job is on the queue, delayed or processing."""
# DEAD counts as terminal: no worker touches it again; an operator's requeue starts a new
# run (attempts reset to 0) rather than continuing this one.
QUEUE_TERMINAL: frozenset[QueueState] = frozenset(QueueState) - QUEUE_ACTIVE
"""States that publish a completion event and store a result."""
# A dead-lettered job's result reads "failed", like a non-retryable failure: callers
# waiting for a result care that it failed; why is in the dead-letter list.
RESULT_STATES: frozenset[QueueState] = QUEUE_TERMINAL - {QueueState.DEAD}
"""The statuses a stored result (`result:<id>`, JobResult.status) can carry."""

JOB_STATUS_OF: Mapping[QueueState, JobStatus] = MappingProxyType(
    {
        QueueState.QUEUED: JobStatus.PENDING,
        QueueState.RETRYING: JobStatus.PENDING,
        QueueState.RUNNING: JobStatus.RUNNING,
        QueueState.SUCCEEDED: JobStatus.SUCCEEDED,
        QueueState.FAILED: JobStatus.FAILED,
        QueueState.DEAD: JobStatus.FAILED,
        QueueState.EXPIRED: JobStatus.FAILED,
        QueueState.CANCELLED: JobStatus.CANCELLED,
    }
)
"""How a queue state reads as a JobStore status (JobQueue.get_record's read-only view)."""


class AttemptOutcome(StrEnum):
    """What one queue_fail or queue_complete call did: the first element of its reply.

    Not a QueueState: it reports a call, not where the job is. RELEASED sets the job
    QUEUED, REQUEUED puts it back on the queue without touching its state (QUEUED or
    RETRYING); SKIP, REPLAY and LOST change nothing; a second element, when there is one,
    is data (a due time, or the job's state). RETRYING, DEAD, FAILED and CANCELLED share their
    values with QueueState on purpose: the script replies with the state it just wrote.
    """

    OK = "ok"
    """complete: the success is recorded (the job is SUCCEEDED)."""
    RETRYING = "retrying"
    """fail: another attempt is due after the backoff; the reply adds when (ms)."""
    DEAD = "dead"
    """fail: that was the last attempt; the job is dead-lettered."""
    FAILED = "failed"
    """fail: a non-retryable error ended the job for good."""
    RELEASED = "released"
    """fail, mode "release": a stopping worker gave the attempt back, not counted."""
    REQUEUED = "requeued"
    """fail, mode "lost": taken but never claimed (the worker died); back on the queue."""
    SKIP = "skip"
    """fail, mode "lost": nothing to do (renewed meanwhile, or already handled)."""
    REPLAY = "replay"
    """This call already happened (retried after a lost reply); fail adds the job's state."""
    LOST = "lost"
    """The token no longer owns the job; the reply adds its state, or "missing"."""
    CANCELLED = "cancelled"
    """complete or fail: a cancel was asked for, so the attempt ended the job CANCELLED."""
