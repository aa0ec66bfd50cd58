"""One agent type's waiting, running, delayed, dead or failed jobs, a bounded page at a
time, newest first, with a cursor to the next page (what the console's agent-type page
shows).

A cursor is a position counted from the oldest end of the structure (the waiting and
delayed sets' ascending rank, the other lists' index from the right):
jobs arriving meanwhile enter at the newest end and shift no page. Jobs leaving (taken,
finished, requeued) can make the next page repeat or skip as many entries as left."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import ValidationError
from ..keys import PRIORITY_LEVELS, WAKE_MARKER, QueueKeys
from ..queue import JobQueue
from ..queue.dead_letters import wire
from ..queue.envelope import queued_record_fields
from .session import read, read_undecoded, redis_now, score_pairs
from .stored import ms_seconds, shown_stored, stored_count, stored_id, stored_ms, stored_text

__all__ = ["MAX_PAGE_SIZE", "JobLine", "JobList", "JobPage", "list_jobs"]

MAX_PAGE_SIZE = 100
"""Most jobs one page holds: no page reads (or draws) more."""


class JobList(StrEnum):
    """The places a live job, or one kept after it ended unsuccessfully, of one agent
    type sits."""

    WAITING = "waiting"
    RUNNING = "running"
    DELAYED = "delayed"
    DEAD = "dead"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class JobLine:
    """One job as a page lists it (no payload, no history: show_job has them)."""

    job_id: str
    state: str | None
    """The record's state; None when the record is gone (expired or purged meanwhile)."""
    attempts: int | None
    """0 when absent; None when it does not parse (then in `unparsed`)."""
    worker: str | None
    """The worker of the current or last attempt."""
    enqueued_at: float | None
    """Seconds since the epoch (Redis time), as the other timestamps."""
    started_at: float | None
    """When the current or last attempt began (a running job's lease age counts from it)."""
    due_at: float | None
    """When a delayed job's next attempt is due."""
    lease_deadline: float | None
    """When a running job's lease runs out unless its worker renews it."""
    finished_at: float | None
    """When it reached its state (a dead letter: when it was dead-lettered; a failed
    job: when it failed)."""
    last_error: str | None
    unparsed: dict[str, str] = field(default_factory=dict)
    """Stored fields that do not parse (attempts and the times), as their text (cut to
    stored.MAX_SHOWN_STORED characters): each is None above, and a page shows it as
    stored. A job id that is not UTF-8 is `job_id` with surrogate escapes."""


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of one list, newest first."""

    agent_type: str
    which: JobList
    read_at: float
    """Redis time (seconds since the epoch) of the read: ages count to it."""
    total: int
    """Entries in the list when the page was read."""
    jobs: tuple[JobLine, ...]
    next_cursor: int | None
    """The cursor of the next (older) page; None on the last page."""


_FIELDS = ("state", "attempts", "worker", "enqueued_at", "started_at", "finished_at", "last_error")


async def list_jobs(
    queue: JobQueue,
    agent_type: str,
    which: JobList,
    *,
    cursor: int | None = None,
    limit: int = 20,
) -> JobPage:
    """The `limit` newest jobs of `which` older than `cursor` (None: the newest page).
    ValidationError for an unknown agent type, a limit outside 1..MAX_PAGE_SIZE or a
    negative cursor."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValidationError("limit", f"must be 1 to {MAX_PAGE_SIZE}, got {limit}")
    if cursor is not None and cursor < 0:
        raise ValidationError("cursor", f"must be 0 or more, got {cursor}")
    keys = await queue.connection.seen_keys(agent_type)
    key = {
        JobList.WAITING: keys.queue,
        JobList.RUNNING: keys.processing,
        JobList.DELAYED: keys.delayed,
        JobList.DEAD: keys.dead,
        JobList.FAILED: keys.failed,
    }[which]
    # Waiting jobs are paged on the queue list: it holds every one, packed or not (an
    # entry of a job expired while it waited shows as gone until a worker pops it). With
    # priority levels, on the three lists as one, in the order they are taken (high's
    # next first, low's newest last): `_waiting_segments`.
    is_set = which == JobList.DELAYED
    now = await redis_now(queue)
    segments: list[tuple[str, int]] = []
    if which == JobList.WAITING:
        segments = await _waiting_segments(queue, keys)
        total = sum(length for _, length in segments)
    else:
        (total,) = await read(queue, [("ZCARD" if is_set else "LLEN", key)])
    end = min(int(total), int(total) if cursor is None else cursor)  # exclusive
    start = max(0, end - limit)
    if end <= 0:
        return JobPage(agent_type, which, now, int(total), (), None)
    if is_set:
        # Ascending rank = oldest first; the page is ranks start..end-1, newest first.
        # ZRANGEBYSCORE ... LIMIT, not ZRANGE by rank: the worker role's grants name it.
        (pairs,) = await read(
            queue,
            [("ZRANGEBYSCORE", key, "-inf", "+inf", "WITHSCORES", "LIMIT", start, end - start)],
        )
        scored = score_pairs(pairs)
        scored.reverse()
        job_ids = [job_id for job_id, _ in scored]
        scores = dict(scored)
    else:
        # The list's newest entry is at the left: right-index r is left-index -(r + 1).
        ranges = _ranges(segments, start, end) if segments else [(key, start, end)]
        pages = await read_undecoded(
            queue, [("LRANGE", part, -stop, -(first + 1)) for part, first, stop in ranges]
        )
        # (A wake marker, keys.WAKE_MARKER, is no job: left out.)
        job_ids = [stored_id(j) for page in pages for j in page if j != _WAKE]
        scores = {}
    # Undecoded: an id or a field that is not UTF-8 is listed as stored, not an error.
    ids = [wire(j) for j in job_ids]
    commands: list[tuple[str | bytes | int, ...]] = [
        ("HMGET", wire(keys.job(j)), *_FIELDS) for j in job_ids
    ]
    if which == JobList.RUNNING:
        commands += [("ZSCORE", keys.leases, j) for j in ids]
    if which == JobList.WAITING and job_ids:
        commands.append(("HMGET", keys.queued, *ids))
    replies = await read_undecoded(queue, commands)
    leases = replies[len(job_ids) :] if which == JobList.RUNNING else []
    packed = replies[-1] if which == JobList.WAITING and job_ids else []
    lines = []
    for index, (job_id, fields) in enumerate(zip(job_ids, replies[: len(job_ids)], strict=True)):
        if packed and packed[index] is not None:
            fields = _packed_fields(keys, job_id, stored_text(packed[index]))
        state, attempts, worker, enqueued, started, finished, error = fields
        gone = all(value is None for value in fields)
        due = scores.get(job_id) if which == JobList.DELAYED else None
        lease = leases[index] if leases else None
        unparsed: dict[str, str] = {}
        count = 0 if attempts in (None, b"", "") else stored_count(attempts)
        if count is None:
            unparsed["attempts"] = shown_stored(attempts)
        times = {}
        for name, raw in (
            ("enqueued_at", enqueued),
            ("started_at", started),
            ("finished_at", finished),
        ):
            ms = stored_ms(raw)
            if ms is None and raw not in (None, b"", ""):
                unparsed[name] = shown_stored(raw)
            times[name] = None if ms is None else ms / 1000
        lines.append(
            JobLine(
                job_id=job_id,
                # No `state` field is QUEUED: enqueue's hot path writes none.
                state=None if gone else (stored_text(state) or "queued"),
                attempts=count,
                worker=stored_text(worker) or None,
                enqueued_at=times["enqueued_at"],
                started_at=times["started_at"],
                due_at=None if due is None else due / 1000,
                lease_deadline=ms_seconds(lease),
                finished_at=times["finished_at"],
                last_error=stored_text(error) or None,
                unparsed=unparsed,
            )
        )
    return JobPage(agent_type, which, now, int(total), tuple(lines), start or None)


_WAKE = WAKE_MARKER.encode()


async def _waiting_segments(queue: JobQueue, keys: QueueKeys) -> list[tuple[str, int]]:
    """The lists waiting jobs are on with their lengths, in the order they are taken:
    high, normal (the queue list), low (queue.priority; a type that uses only normal
    has two empty lists)."""
    lists = [keys.level_queue(level) for level in PRIORITY_LEVELS]
    lengths = await read(queue, [("LLEN", key) for key in lists])
    return [(key, int(length)) for key, length in zip(lists, lengths, strict=True)]


def _ranges(segments: list[tuple[str, int]], start: int, end: int) -> list[tuple[str, int, int]]:
    """Right-indices [start, end) of the lists of `segments` taken as one list (the first
    segment's right end its right end), as (list, first, stop) right-indices of each,
    newest (leftmost) first."""
    ranges = []
    offset = 0
    for key, length in segments:
        first, stop = max(start, offset), min(end, offset + length)
        if first < stop:
            ranges.append((key, first - offset, stop - offset))
        offset += length
    ranges.reverse()
    return ranges


def _packed_fields(keys: QueueKeys, job_id: str, packed: str) -> list[str | None]:
    """_FIELDS of a job still packed in the queued hash (queue/envelope.py)."""
    fields = queued_record_fields(keys, job_id, packed)
    return [fields.get(name) for name in _FIELDS]
