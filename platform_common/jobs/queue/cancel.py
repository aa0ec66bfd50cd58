"""Cancelling jobs: one job by id, or every job of a user session, whatever its type
(docs/user-guide.md, "Cancel", says what a caller sees).

A job that waits (queued, scheduled, or delayed for a retry) is cancelled on the spot by
lua/queue_cancel.lua and never starts. A running job is asked to stop: the request is
stored in its type's cancels hash (job id -> reason) and sent on its type's control
stream (keys.py, `cancels` and `control`), which every worker process reads
(worker/cancel_watch.py). Whatever the handler does after that, the complete, fail and
reaper scripts end the job cancelled."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import orjson

from ..errors import ValidationError
from ..keys import ARRIVAL_BUCKET_MS, QueueKeys
from ..validation import validate_job_id, validate_text
from .connection import QueueConnection
from .expiry import CORRUPT_RESULT_TTL_SECONDS
from .payload_fields import MAX_TEXT_LENGTH

__all__ = [
    "CANCEL_STREAM_MAX",
    "MAX_REASON_LENGTH",
    "CancelOutcome",
    "CancelReport",
    "cancel_jobs",
    "cancel_session",
]

MAX_REASON_LENGTH = 1000
"""The longest reason accepted (characters): it is stored in each cancelled job's result."""
CANCEL_STREAM_MAX = 10_000
"""About how many cancel requests a type's control stream keeps (XADD MAXLEN ~): a worker
reads each within about a second, so only a worker stalled for that many requests could
miss one: its attempt still ends cancelled when it completes or fails (the fence)."""
SCAN_COUNT = 1000
"""Entries of the queued hash and of the expiry set one session scan step reads."""
BATCH = 500
"""Job ids per cancel script call (one call's keys, two per job)."""


class CancelOutcome(StrEnum):
    """What a cancel did to one job."""

    CANCELLED = "cancelled"
    """It waited (queued, scheduled or delayed): cancelled now, it never starts."""
    CANCELLING = "cancelling"
    """It runs: its worker is told, and the attempt ends cancelled whatever it returns."""
    FINISHED = "finished"
    """It had already ended (`state` says how): nothing changed."""
    UNKNOWN = "unknown"
    """No such job (never enqueued, or its result has expired): nothing changed."""


@dataclass(frozen=True, slots=True)
class CancelReport:
    """One job's cancel."""

    agent_type: str
    job_id: str
    outcome: CancelOutcome
    state: str | None = None
    """For FINISHED: the state it ended in (succeeded, failed, dead, expired, cancelled)."""


def check_reason(reason: object) -> str:
    """The reason as stored ("" for None); ValidationError naming `reason` otherwise."""
    if reason is None:
        return ""
    text = validate_text(reason, "reason")
    if len(text) > MAX_REASON_LENGTH:
        raise ValidationError("reason", f"longer than {MAX_REASON_LENGTH} characters ({len(text)})")
    return text


def check_session_id(session_id: object) -> str:
    """A session id as payloads carry one; ValidationError naming `session_id` otherwise."""
    text = validate_text(session_id, "session_id")
    if not text or len(text) > MAX_TEXT_LENGTH:
        raise ValidationError(
            "session_id", f"must be 1 to {MAX_TEXT_LENGTH} characters, got {len(text)}"
        )
    return text


async def cancel_jobs(
    connection: QueueConnection,
    agent_type: str,
    job_ids: Sequence[str],
    reason: str | None = None,
) -> list[CancelReport]:
    """Cancel `job_ids` of `agent_type` (a type configured, or one Redis has seen), one
    report per id in order."""
    stored_reason = check_reason(reason)
    ids = [validate_job_id(job_id) for job_id in job_ids]
    keys = await connection.seen_keys(agent_type)
    reports: list[CancelReport] = []
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        reply = await connection.run_script(
            connection.scripts.cancel,
            _script_keys(keys, chunk),
            [keys.channel, stored_reason, ARRIVAL_BUCKET_MS, CANCEL_STREAM_MAX,
             CORRUPT_RESULT_TTL_SECONDS, *chunk],
        )  # fmt: skip
        reports.extend(_report(agent_type, entry) for entry in reply)
    return reports


async def cancel_session(
    connection: QueueConnection, session_id: str, reason: str | None = None
) -> list[CancelReport]:
    """Cancel every job of `session_id` that has not finished, of every agent type Redis
    has seen (each type its own slot on a cluster). No index is kept (an enqueue pays
    nothing for this): each type's live jobs are read where they are, a page at a time,
    by lua/queue_session_scan.lua, and the jobs found are cancelled as `cancel_jobs`
    does. Its cost grows with the live jobs of every type."""
    check_reason(reason)
    sid = check_session_id(session_id)
    # As the producer stores it (payload.encode_payload: orjson, compact, UTF-8).
    needle = '"session_id":' + orjson.dumps(sid).decode()
    reports: list[CancelReport] = []
    for agent_type in (await connection.discover_types()).types:
        keys = connection.keys(agent_type)
        found: dict[str, None] = {}
        cursors = ["0", "0"]
        while cursors != ["done", "done"]:
            queued, expiry, *ids = await connection.run_script(
                connection.scripts.session_scan,
                [keys.queued, keys.expiry],
                [*cursors, needle, sid, SCAN_COUNT, keys.job("")],
            )
            cursors = [_text(queued), _text(expiry)]
            found.update(dict.fromkeys(_text(job_id) for job_id in ids))
        if found:
            reports += await cancel_jobs(connection, agent_type, list(found), reason)
    return reports


def _script_keys(keys: QueueKeys, job_ids: Iterable[str]) -> list[str]:
    script_keys = [
        keys.queued, keys.waiting, keys.delayed, keys.expiry, keys.stats, keys.arrivals,
        keys.arrived, keys.control, keys.cancels,
    ]  # fmt: skip
    for job_id in job_ids:
        script_keys += [keys.job(job_id), keys.result(job_id)]
    return script_keys


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _report(agent_type: str, entry: list[object]) -> CancelReport:
    job_id, outcome, *rest = (_text(part) for part in entry)
    return CancelReport(agent_type, job_id, CancelOutcome(outcome), rest[0] if rest else None)
