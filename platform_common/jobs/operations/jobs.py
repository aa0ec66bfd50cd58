"""`job show`: one job as the queue holds it: state, attempts with their errors and
tracebacks, its last progress report, payload and result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRecord, JobNotFound
from ..keys import QueueKeys
from ..queue import JobQueue, JobResult, QueueState
from ..queue.dead_letters import wire
from ..queue.envelope import queued_record_fields
from ..queue.results import parse_result
from ..status import QUEUE_ACTIVE
from .dead_letter_ops import KeptList
from .session import read_undecoded
from .stored import ms_seconds, stored_ms, stored_text

__all__ = ["Attempt", "JobDetail", "NotADeadLetter", "Unparsed", "show_dead_letter", "show_job"]


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
class Unparsed:
    """A stored field that does not parse (the worker dead-letters such a job as
    "corrupt"), shown as the text it holds rather than refused."""

    field: str
    """"payload", "history", "result", or a number field such as "attempts"."""
    problem: str
    """Why it does not parse, e.g. "not UTF-8 (byte 0: invalid start byte)"."""
    raw: str
    """What is stored, as text: bytes that are not UTF-8 as backslash escapes (\\xff)."""
    size: int
    """Bytes stored."""


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
    """Its TTL deadline: expired if not finished by then (only while it is `active`)."""
    due_at: float | None
    """When the retry of a failed attempt was due; the record keeps it after that retry
    ran, so only `retry_due_at` says a retry is pending."""
    requeued_at: float | None
    """When an operator last requeued it from the dead letters."""
    last_error: str | None
    history: tuple[Attempt, ...]
    """Failed attempts, oldest first."""
    payload: Any
    """The payload's JSON (an object, for any job enqueue accepted); None when the record
    is gone (expired) and only the result is left, or when it does not parse (then
    `unparsed` holds its text)."""
    result: JobResult | None
    """The stored outcome of a finished job (kept for its TTL)."""
    unparsed: tuple[Unparsed, ...] = ()
    """Stored fields that do not parse, with their text: each is shown as absent above
    (the payload None, the history empty)."""
    run_at: float | None = None
    """When it was scheduled to run (enqueue with a delay or run_at); None if it was not."""
    priority: str = "normal"
    """Its priority level (queue.priority): "high", "normal" or "low", as stored."""
    kept_until: float | None = None
    """When Redis drops what a job that ended left (its record and result, or only the
    result): the job's TTL after it succeeded or expired, the dead-letter retention
    (never less than the TTL) after it died or failed. None while it is `active`, or
    when nothing will drop it (a dead letter kept until requeued or purged)."""

    progress: Any = None
    """The last progress report of its handler (a JSON object), kept with the record;
    None when it never reported or the report does not parse (then `unparsed` holds it)."""
    progress_at: float | None = None
    """When that report was stored."""
    cancel_requested: str | None = None
    """While it runs: the reason of a cancel asked for (its attempt ends cancelled)."""

    @property
    def cancel_reason(self) -> str | None:
        """Why it was cancelled (the cancelled result's error), for a cancelled job."""
        if self.state == QueueState.CANCELLED and self.result is not None:
            return self.result.error
        return None

    @property
    def active(self) -> bool:
        """Waiting, running or delayed for a retry: `expires_at` is its deadline."""
        return self.state in QUEUE_ACTIVE

    @property
    def retry_due_at(self) -> float | None:
        """When its next attempt is due, while it is delayed for a retry; else None."""
        return self.due_at if self.state == QueueState.RETRYING else None

    @property
    def kept_by(self) -> str | None:
        """What sets `kept_until`: "the dead-letter retention" or "its TTL"; None while
        the job is active."""
        if self.active:
            return None
        if self.state in (QueueState.DEAD, QueueState.FAILED):
            return "the dead-letter retention"
        return "its TTL"

    def unparsed_field(self, field: str) -> Unparsed | None:
        """The stored `field` if it does not parse, else None."""
        return next((u for u in self.unparsed if u.field == field), None)


class NotADeadLetter(JobNotFound):
    """`dead show` (or `failed show`) of a job that exists but is not on that list."""

    def __init__(self, detail: JobDetail, kept: KeptList = KeptList.DEAD) -> None:
        self.detail = detail
        self.kept = kept
        super().__init__(detail.job_id)

    def __str__(self) -> str:
        return (
            f"job {self.job_id!r} is not a {self.kept.noun} of {self.detail.agent_type!r} "
            f"(its state: {self.detail.state}); `job show` shows it"
        )


async def show_job(queue: JobQueue, agent_type: str, job_id: str) -> JobDetail:
    """The job's record and result; JobNotFound when neither exists (never enqueued, or
    gone with its TTL). `agent_type` must be configured or seen in Redis (else
    ValidationError).

    Read undecoded: a record the worker dead-letters as "corrupt" (a payload that is not
    UTF-8 or not JSON, a damaged history) is exactly what on-call needs to look at, so
    what does not parse comes back as text in `unparsed`, never as an error."""
    keys = await queue.connection.seen_keys(agent_type)
    stored, packed, stored_result, record_drop, result_drop, asked = await read_undecoded(
        queue,
        [
            ("HGETALL", wire(keys.job(job_id))),
            ("HGET", keys.queued, wire(job_id)),
            ("GET", wire(keys.result(job_id))),
            # When Redis drops an ended job's record and result (what `kept_until`
            # reports): the TTL its last script set, whichever retention that used.
            ("PEXPIRETIME", wire(keys.job(job_id))),
            ("PEXPIRETIME", wire(keys.result(job_id))),
            ("HGET", keys.cancels, wire(job_id)),  # a pending cancel request's reason
        ],
    )
    fields = _as_fields(stored)
    if not fields and packed is not None:  # waiting, still packed (queue/envelope.py)
        fields = _packed_fields(keys, job_id, packed)
    record = _Record(fields)
    result = record.result(agent_type, job_id, stored_result)
    if not fields and result is None:
        raise JobNotFound(job_id)
    if not fields:
        assert result is not None
        return JobDetail(
            agent_type, job_id, result.status, 0, None, None, None, None, None, None, None,
            None, result.error, (), None, result, record.noted(),
            kept_until=_drop_time(result_drop),
        )  # fmt: skip
    # No `state` field is QUEUED: enqueue's hot path writes none.
    state = QueueState(record.text("state") or QueueState.QUEUED)
    return JobDetail(
        agent_type=agent_type,
        job_id=job_id,
        state=state,
        attempts=record.number("attempts") or 0,
        max_attempts=record.number("max_attempts"),
        worker=record.text("worker") or None,
        enqueued_at=record.seconds("enqueued_at"),
        started_at=record.seconds("started_at"),
        finished_at=record.seconds("finished_at"),
        expires_at=record.seconds("expires_at"),
        due_at=record.seconds("due_at"),
        requeued_at=record.seconds("requeued_at"),
        last_error=record.text("last_error") or None,
        history=record.history(),
        payload=record.document("payload"),
        result=result,
        run_at=record.seconds("run_at"),
        progress=record.document("progress"),
        progress_at=record.seconds("progress_at"),
        priority=record.text("priority") or "normal",
        unparsed=record.noted(),
        kept_until=None if state in QUEUE_ACTIVE else _drop_time(record_drop),
        cancel_requested=asked.decode(errors="replace")
        if isinstance(asked, bytes) and state in QUEUE_ACTIVE
        else None,
    )


async def show_dead_letter(
    queue: JobQueue, agent_type: str, job_id: str, kept: KeptList = KeptList.DEAD
) -> JobDetail:
    """show_job of a job kept on `kept` (a dead letter by default); NotADeadLetter when
    the job is in another state."""
    detail = await show_job(queue, agent_type, job_id)
    if detail.state != kept.state:
        raise NotADeadLetter(detail, kept)
    return detail


def _as_fields(reply: Any) -> dict[str, bytes]:
    return {stored_text(k): bytes(v) for k, v in dict(reply or {}).items()}


def _packed_fields(keys: QueueKeys, job_id: str, packed: bytes) -> dict[str, bytes]:
    # surrogateescape keeps every byte through unpacking: the payload's bytes come back
    # as stored, to be checked like a job hash's.
    text = packed.decode("utf-8", "surrogateescape")
    fields = queued_record_fields(keys, job_id, text)
    return {name: value.encode("utf-8", "surrogateescape") for name, value in fields.items()}


class _Record:
    """A job hash's stored bytes, read field by field; what does not parse is noted in
    `unparsed` (with its text) and read as absent."""

    def __init__(self, fields: dict[str, bytes]) -> None:
        self._fields = fields
        self.unparsed: list[Unparsed] = []

    def _note(self, name: str, problem: str, raw: bytes) -> None:
        self.unparsed.append(Unparsed(name, problem, stored_text(raw), len(raw)))

    def noted(self) -> tuple[Unparsed, ...]:
        """What did not parse, the payload first, then the history and the result."""
        order = {"payload": 0, "history": 1, "result": 2}
        return tuple(sorted(self.unparsed, key=lambda u: order.get(u.field, 3)))

    def text(self, name: str) -> str:
        return stored_text(self._fields.get(name))

    def number(self, name: str) -> int | None:
        raw = self._fields.get(name)
        if raw is None or raw == b"":
            return None
        try:
            return int(float(raw))
        except (ValueError, OverflowError):  # OverflowError: "1e400" is infinite
            self._note(name, "not a number", raw)
            return None

    def seconds(self, name: str) -> float | None:
        """Milliseconds (as the scripts write them) -> seconds; None when absent, or (noted)
        when it is no time a page can show as a date."""
        millis = self.number(name)
        if millis is not None and stored_ms(str(millis)) is None:
            self._note(name, "not a time (outside the years 1970 to 9999)", self._fields[name])
            return None
        return None if millis is None else millis / 1000

    def _json(self, name: str, raw: bytes) -> tuple[bool, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._note(name, f"not UTF-8 (byte {exc.start}: {exc.reason})", raw)
            return False, None
        try:
            return True, json.loads(text)
        except ValueError as exc:
            self._note(name, f"not JSON ({exc})", raw)
            return False, None

    def document(self, name: str) -> Any:
        """The field's JSON; None when absent or when it does not parse (noted)."""
        raw = self._fields.get(name)
        if raw is None:
            return None
        return self._json(name, raw)[1]

    def history(self) -> tuple[Attempt, ...]:
        raw = self._fields.get("history")
        if not raw:
            return ()
        parsed, entries = self._json("history", raw)
        if not parsed:
            return ()
        # Lua's cjson encodes an empty table as {}: no attempts, not a mapping of them.
        if not isinstance(entries, list):
            return ()
        try:
            return tuple(_attempt(e) for e in entries if isinstance(e, dict))
        except (TypeError, ValueError, OverflowError) as exc:
            self._note("history", f"not an attempt history ({exc})", raw)
            return ()

    def result(self, agent_type: str, job_id: str, raw: bytes | None) -> JobResult | None:
        if raw is None:
            return None
        try:
            return parse_result(agent_type, job_id, raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            self._note("result", f"not UTF-8 (byte {exc.start}: {exc.reason})", raw)
        except InvalidRecord as exc:
            self._note("result", exc.problem, raw)
        return None


def _drop_time(reply: Any) -> float | None:
    """A PEXPIRETIME reply as seconds since the epoch; None for no TTL (-1) or no key (-2)."""
    return int(reply) / 1000 if int(reply) > 0 else None


def _attempt(entry: dict[str, Any]) -> Attempt:
    return Attempt(
        attempt=int(entry.get("attempt") or 0),
        worker=str(entry.get("worker") or ""),
        started_at=ms_seconds(entry.get("started_at")),
        ended_at=ms_seconds(entry.get("ended_at")),
        outcome=str(entry.get("outcome") or ""),
        error=str(entry.get("error") or ""),
        traceback=str(entry["traceback"]) if entry.get("traceback") else None,
        retry_at=ms_seconds(entry.get("retry_at")),
    )
