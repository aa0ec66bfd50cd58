"""`job show`: one job as the queue holds it: state, attempts with their errors and
tracebacks, payload and result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import JobNotFound
from ..queue import JobQueue, JobResult, QueueState
from ..queue.envelope import queued_record_fields
from .session import read

__all__ = ["Attempt", "JobDetail", "NotADeadLetter", "show_dead_letter", "show_job"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed attempt, from the job's history (what queue_fail recorded)."""

    attempt: int
    worker: str
    started_at: float | None
    """Seconds since the epoch (Redis time)."""
    ended_at: float | None
    outcome: str
    """"error" the handler raised, "lost" its worker died, "corrupt" the stored job did
    not parse, "fatal" a non-retryable error."""
    error: str
    traceback: str | None
    """The traceback's last lines (bounded), when one was recorded."""
    retry_at: float | None
    """When another attempt was scheduled, if one was."""


@dataclass(frozen=True, slots=True)
class JobDetail:
    """Everything the queue knows about one job."""

    agent_type: str
    job_id: str
    state: QueueState
    """EXPIRED (or the result's status) when only the result is left."""
    attempts: int
    """Attempts used; a requeued dead letter starts again from 0."""
    max_attempts: int | None
    worker: str | None
    """The worker of the current or last attempt."""
    enqueued_at: float | None
    """Seconds since the epoch (Redis time), as the other timestamps."""
    started_at: float | None
    finished_at: float | None
    """When it reached its state (finished, dead-lettered or failed)."""
    expires_at: float | None
    """Its TTL deadline: expired if not finished by then."""
    due_at: float | None
    """When its next retry is due (RETRYING)."""
    requeued_at: float | None
    """When an operator last requeued it from the dead letters."""
    last_error: str | None
    history: tuple[Attempt, ...]
    """Failed attempts, oldest first."""
    payload: dict[str, Any] | None
    """None when the record is gone (expired) and only the result is left."""
    result: JobResult | None
    """The stored outcome of a finished job (kept for its TTL)."""


class NotADeadLetter(JobNotFound):
    """`dead show` of a job that exists but is not a dead letter."""

    def __init__(self, detail: JobDetail) -> None:
        self.detail = detail
        super().__init__(detail.job_id)

    def __str__(self) -> str:
        return (
            f"job {self.job_id!r} is not a dead letter of {self.detail.agent_type!r} "
            f"(its state: {self.detail.state}); `job show` shows it"
        )


async def show_job(queue: JobQueue, agent_type: str, job_id: str) -> JobDetail:
    """The job's record and result; JobNotFound when neither exists (never enqueued, or
    gone with its TTL). `agent_type` must be a configured one (ValidationError)."""
    keys = queue.connection.known_keys(agent_type)
    fields, packed = await read(
        queue, [("HGETALL", keys.job(job_id)), ("HGET", keys.queued, job_id)]
    )
    fields = _as_dict(fields)
    if not fields and packed is not None:  # waiting, still packed (queue/envelope.py)
        fields = queued_record_fields(keys, job_id, str(packed))
    result = await queue.get_result(job_id, agent_type)
    if not fields and result is None:
        raise JobNotFound(job_id)
    if not fields:
        assert result is not None
        return JobDetail(
            agent_type, job_id, result.status, 0, None, None, None, None, None, None, None,
            None, result.error, (), None, result,
        )  # fmt: skip
    return JobDetail(
        agent_type=agent_type,
        job_id=job_id,
        state=_state(fields),
        attempts=int(fields.get("attempts") or 0),
        max_attempts=_int(fields.get("max_attempts")),
        worker=fields.get("worker") or None,
        enqueued_at=_seconds(fields.get("enqueued_at")),
        started_at=_seconds(fields.get("started_at")),
        finished_at=_seconds(fields.get("finished_at")),
        expires_at=_seconds(fields.get("expires_at")),
        due_at=_seconds(fields.get("due_at")),
        requeued_at=_seconds(fields.get("requeued_at")),
        last_error=fields.get("last_error") or None,
        history=_history(fields.get("history")),
        payload=json.loads(fields["payload"]) if "payload" in fields else None,
        result=result,
    )


async def show_dead_letter(queue: JobQueue, agent_type: str, job_id: str) -> JobDetail:
    """show_job of a dead letter; NotADeadLetter when the job is in another state."""
    detail = await show_job(queue, agent_type, job_id)
    if detail.state != QueueState.DEAD:
        raise NotADeadLetter(detail)
    return detail


def _as_dict(fields: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(fields).items()}


def _state(fields: dict[str, str]) -> QueueState:
    # No `state` field is QUEUED: enqueue's hot path writes none.
    return QueueState(fields.get("state") or QueueState.QUEUED)


def _int(raw: Any) -> int | None:
    return None if raw in (None, "") else int(raw)


def _seconds(raw_ms: Any) -> float | None:
    """Milliseconds (as the scripts write them) -> seconds; None when absent."""
    return None if raw_ms in (None, "") else int(float(raw_ms)) / 1000


def _history(raw: str | None) -> tuple[Attempt, ...]:
    entries = json.loads(raw) if raw else []
    # Lua's cjson encodes an empty table as {}: no attempts, not a mapping of them.
    return (
        tuple(_attempt(e) for e in entries if isinstance(e, dict))
        if isinstance(entries, list)
        else ()
    )


def _attempt(entry: dict[str, Any]) -> Attempt:
    return Attempt(
        attempt=int(entry.get("attempt") or 0),
        worker=str(entry.get("worker") or ""),
        started_at=_seconds(entry.get("started_at")),
        ended_at=_seconds(entry.get("ended_at")),
        outcome=str(entry.get("outcome") or ""),
        error=str(entry.get("error") or ""),
        traceback=entry.get("traceback") or None,
        retry_at=_seconds(entry.get("retry_at")),
    )
