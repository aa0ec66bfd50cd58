"""`info`: each agent type's depths, workers, oldest waiting job and counters, and the
counts of the last minute from two readings of the counters (RecentCounts)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..metric_catalogue import HEARTBEAT_CLOCK_TOLERANCE_MS
from ..queue import JobQueue, QueueSettings
from ..queue.pausing import pause_time
from ..redis.replies import first_score
from .session import read, redis_now

__all__ = [
    "HEARTBEAT_WINDOW_BEATS",
    "Counts",
    "Overview",
    "Recent",
    "RecentCounts",
    "TypeOverview",
    "counter_increase",
    "heartbeat_window",
    "read_overview",
]

HEARTBEAT_WINDOW_BEATS = 6
"""A worker is active while its last heartbeat is newer than this many heartbeat
intervals (30 s with the default 5 s: the exporter's default window too)."""


def heartbeat_window(settings: QueueSettings) -> float:
    """Seconds since its last heartbeat within which a worker counts as active."""
    return HEARTBEAT_WINDOW_BEATS * settings.heartbeat_interval


@dataclass(frozen=True, slots=True)
class Counts:
    """Jobs counted by the queue's counters (keys.STATS_COUNTERS)."""

    enqueued: int
    """Entered the queue (enqueued, or requeued from the dead letters)."""
    completed: int
    failed: int
    """Ended failed: dead-lettered, or a non-retryable error."""


@dataclass(frozen=True, slots=True)
class TypeOverview:
    """One agent type's queue at one moment."""

    agent_type: str
    queued: int
    """Jobs waiting on the queue list."""
    running: int
    """Jobs a worker has taken (the processing list)."""
    delayed: int
    """Jobs waiting for a retry's backoff."""
    dead: int
    active_workers: int
    """Workers whose last heartbeat is within heartbeat_window()."""
    oldest_waiting_seconds: float | None
    """How long the oldest waiting job has waited; None when nothing waits."""
    totals: Counts
    """Counters since the queue's stats began (they never reset)."""
    paused: bool = False
    """Whether the type is paused (JobQueue.pause): workers start none of its jobs."""
    paused_since: float | None = None
    """When it was paused (Redis time, seconds); None when running or unknown."""
    queued_by_priority: dict[str, int] = field(default_factory=dict)
    """`queued` by priority level (high, normal, low; JobQueue.stats)."""

    @property
    def queued_levels(self) -> str:
        """The high and low jobs of `queued`, e.g. "high 3, low 1"; "" when none waits
        at either (so a type that uses only normal shows its depth alone)."""
        shown = [f"{level} {self.queued_by_priority.get(level, 0):,}" for level in ("high", "low")]
        if not any(self.queued_by_priority.get(level) for level in ("high", "low")):
            return ""
        return ", ".join(shown)


@dataclass(frozen=True, slots=True)
class Overview:
    """Every requested agent type, read at `read_at` (Redis time, seconds since the epoch)."""

    read_at: float
    types: tuple[TypeOverview, ...]


async def read_overview(queue: JobQueue, agent_types: Sequence[str]) -> Overview:
    """Depths and counters through JobQueue.stats; workers and the oldest waiting job
    from the heartbeat, waiting and arrival sets (ZCOUNT and one ZRANGE entry each:
    bounded reads), the pause from the paused key."""
    now = await redis_now(queue)
    active_since_ms = int((now - heartbeat_window(queue.settings)) * 1000)
    believed_until_ms = int(now * 1000) + HEARTBEAT_CLOCK_TOLERANCE_MS
    extras = []
    for agent_type in agent_types:
        keys = queue.connection.keys(agent_type)
        extras += [
            # (a beat dated in the future is no proof of life: metric_catalogue's
            # tolerance, as the exporter counts)
            ("ZCOUNT", keys.workers, f"({active_since_ms}", believed_until_ms),
            ("ZRANGE", keys.waiting, 0, 0, "WITHSCORES"),
            # Packed waiting jobs count by the second they arrived in (keys.py).
            ("ZRANGE", keys.arrivals, 0, 0, "WITHSCORES"),
            ("GET", keys.paused),
        ]
    stats = await asyncio.gather(*(queue.stats(t) for t in agent_types))
    replies = await read(queue, extras)
    types = []
    for index, (agent_type, stat) in enumerate(zip(agent_types, stats, strict=True)):
        workers, waiting, arrived, paused = replies[4 * index : 4 * index + 4]
        firsts = [s for s in (_first_score(waiting), _first_score(arrived)) if s is not None]
        oldest = min(firsts) if firsts else None
        types.append(
            TypeOverview(
                agent_type=agent_type,
                queued=stat.queued,
                running=stat.in_progress,
                delayed=stat.delayed,
                dead=stat.dead,
                active_workers=int(workers),
                # A producer's clock may run ahead of Redis': never a negative age.
                oldest_waiting_seconds=None if oldest is None else max(0.0, now - oldest / 1000),
                totals=Counts(
                    stat.counters["enqueued"], stat.counters["completed"], stat.counters["failed"]
                ),
                paused=paused is not None,
                paused_since=pause_time(paused),
                queued_by_priority=stat.queued_by_priority,
            )
        )
    return Overview(now, tuple(types))


def _first_score(reply: object) -> float | None:
    score = first_score(reply)
    return None if score is None else float(score)


@dataclass(frozen=True, slots=True)
class Recent:
    """What the counters counted over the last `seconds` (at most about a minute)."""

    counts: Counts
    seconds: float
    """The span the counts cover: 0 on the first reading, then up to WINDOW plus one
    refresh interval (the two readings are whole refreshes apart)."""


class RecentCounts:
    """The last minute's counts, from readings kept while a watch refreshes.

    The queue keeps only running totals, so "in the last minute" needs a reading from a
    minute ago: this keeps the readings of the last WINDOW seconds (plus the newest one
    older than that, the baseline) and reports the difference. Until a minute has passed
    it reports the span it has, and says so in `Recent.seconds`."""

    WINDOW = 60.0

    def __init__(self) -> None:
        self._readings: deque[Overview] = deque()

    def add(self, overview: Overview) -> dict[str, Recent]:
        """Record `overview`; the counts of each of its types since the baseline."""
        self._readings.append(overview)
        horizon = overview.read_at - self.WINDOW
        while len(self._readings) > 1 and self._readings[1].read_at <= horizon:
            self._readings.popleft()
        baseline = self._readings[0]
        before = {t.agent_type: t.totals for t in baseline.types}
        recent = {}
        for now in overview.types:
            then = before.get(now.agent_type, now.totals)
            recent[now.agent_type] = Recent(
                Counts(
                    counter_increase(then.enqueued, now.totals.enqueued),
                    counter_increase(then.completed, now.totals.completed),
                    counter_increase(then.failed, now.totals.failed),
                ),
                overview.read_at - baseline.read_at,
            )
        return recent


def counter_increase(before: int, after: int) -> int:
    # A counter below its earlier reading was reset (its stats hash deleted): as
    # Prometheus' increase(), count from zero.
    return after - before if after >= before else after
