"""Scheduled jobs: `enqueue(job, delay=...)` or `enqueue(job, run_at=...)`.

A scheduled job waits as a retry does (keys.py): its job hash, its id in the delayed set
with its due time, its deadline in the expiry set, until the promoter queues it
(lua/queue_promote.lua). docs/user-guide.md, "Scheduled jobs", says the rest (when a
schedule is refused, how latency counts)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..errors import InvalidPayload
from ..validation import MAX_TTL_SECONDS, is_int

__all__ = ["Delay", "RunAt", "Schedule", "late", "schedule_of"]

Delay = float | int | timedelta
RunAt = datetime


@dataclass(frozen=True, slots=True)
class Schedule:
    """When the jobs of one enqueue call are due."""

    at_ms: int | None = None
    """An instant (ms since the epoch), for run_at."""
    after_ms: int | None = None
    """A delay (ms) after Redis' clock at the enqueue, for delay."""

    @property
    def argument(self) -> str:
        """The enqueue script's schedule argument: "@<ms>" or "+<ms>"."""
        return f"@{self.at_ms}" if self.at_ms is not None else f"+{self.after_ms}"

    def describe(self) -> str:
        if self.at_ms is not None:
            return f"run_at {_iso(self.at_ms)}"
        return f"a delay of {(self.after_ms or 0) / 1000:g} s"


def schedule_of(delay: object = None, run_at: object = None) -> Schedule | None:
    """The schedule of `delay` (seconds, >= 0, or a timedelta) or `run_at` (an aware
    datetime), None when neither is given; InvalidPayload naming the argument when it is
    not one of those, or when both are given."""
    if delay is not None and run_at is not None:
        raise InvalidPayload({"run_at": "give delay or run_at, not both"})
    if delay is not None:
        seconds = _delay_seconds(delay)
        return Schedule(after_ms=math.ceil(seconds * 1000))
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise InvalidPayload(
                {"run_at": f"must be a datetime with a timezone, got {type(run_at).__name__}"}
            )
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise InvalidPayload(
                {"run_at": f"must be an aware datetime (with a timezone), got {run_at!r:.80}"}
            )
        # (An instant before 1970 is past like any other: due at once.)
        return Schedule(at_ms=max(0, math.floor(run_at.timestamp() * 1000)))
    return None


def _delay_seconds(delay: object) -> float:
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif is_int(delay) or (isinstance(delay, float) and not isinstance(delay, bool)):
        seconds = float(delay)
    else:
        raise InvalidPayload(
            {"delay": f"must be seconds (an int or a float) or a timedelta, got {delay!r:.80}"}
        )
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_TTL_SECONDS:
        raise InvalidPayload(
            {"delay": f"must be from 0 to {MAX_TTL_SECONDS} s (MAX_TTL_SECONDS), got {delay!r:.80}"}
        )
    return seconds


def late(job_id: str, deadline_ms: int, due_ms: int, schedule: Schedule) -> str:
    """The refusal of a job that would expire before its schedule makes it due."""
    return (
        f"job {job_id!r}: {schedule.describe()} makes it due at {_iso(due_ms)}, not before its "
        f"expiry at {_iso(deadline_ms)} (created_at + ttl_seconds): it would expire unrun"
    )


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms since the epoch"
