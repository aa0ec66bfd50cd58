"""The last hour's completed and failed jobs per minute, from readings of the counters
kept while something (the console's overview) reads them.

The queue keeps only running totals (keys.STATS_COUNTERS), never a time series: a
minute's count is the difference of two readings, so the history covers only the
minutes in which this process read the counters. Minutes without a reading before them
are reported as not covered (`Minute.covered`), not as zero."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .overview import Counts, Overview, counter_increase

__all__ = ["CounterHistory", "Minute", "grouped"]


@dataclass(frozen=True, slots=True)
class Minute:
    """What one agent type's counters counted in one minute."""

    start: float
    """The minute's start, seconds since the epoch (Redis time)."""
    completed: int
    failed: int
    covered: bool
    """Readings before and in this minute measured it; False: nothing is known (no one
    read the counters then), and `completed` and `failed` are 0."""
    minutes: int = 1
    """The minutes it spans from `start` (a day's chart puts several in one bar): its
    counts are those of its covered minutes, and it is covered when any of them is."""


def grouped(minutes: Sequence[Minute], size: int) -> tuple[Minute, ...]:
    """Consecutive runs of `size` minutes (oldest first, a multiple of `size` of them)
    as one Minute each."""
    bars = []
    for first in range(0, len(minutes), size):
        run = minutes[first : first + size]
        bars.append(
            Minute(
                run[0].start,
                sum(m.completed for m in run),
                sum(m.failed for m in run),
                any(m.covered for m in run),
                sum(m.minutes for m in run),
            )
        )
    return tuple(bars)


class CounterHistory:
    """Keeps the last reading of each minute for an hour; the per-minute increases.

    An increase between two readings some minutes apart is put in the later reading's
    minute (it happened somewhere in between); the minutes between are not covered."""

    MINUTES = 60

    def __init__(self) -> None:
        # (minute index, totals per agent type), oldest first; one per minute plus the
        # newest reading before the hour, the baseline of the first minute.
        self._readings: deque[tuple[int, dict[str, Counts]]] = deque()

    def add(self, overview: Overview) -> dict[str, tuple[Minute, ...]]:
        """Record `overview`; each of its types' last MINUTES minutes, oldest first."""
        minute = math.floor(overview.read_at / 60)
        totals = {t.agent_type: t.totals for t in overview.types}
        if self._readings and self._readings[-1][0] == minute:
            self._readings.pop()
        self._readings.append((minute, totals))
        first = minute - self.MINUTES + 1
        while len(self._readings) > 1 and self._readings[1][0] < first:
            self._readings.popleft()
        return {agent_type: self._minutes(agent_type, first) for agent_type in totals}

    def _minutes(self, agent_type: str, first: int) -> tuple[Minute, ...]:
        measured: dict[int, tuple[int, int]] = {}
        previous: Counts | None = None
        for minute, totals in self._readings:
            now = totals.get(agent_type)
            if now is not None and previous is not None:
                measured[minute] = (
                    counter_increase(previous.completed, now.completed),
                    counter_increase(previous.failed, now.failed),
                )
            previous = now
        minutes = []
        for index in range(first, first + self.MINUTES):
            completed, failed = measured.get(index, (0, 0))
            minutes.append(Minute(index * 60.0, completed, failed, index in measured))
        return tuple(minutes)
