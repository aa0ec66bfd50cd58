"""The overview's chart from Prometheus, when the console is given its URL: the last
hour per minute, or the last day in bars of 24 minutes.

Prometheus has scraped the exporter's counters all along, so it can fill every bar.
Two range queries (`increase(<counter>[<bar>])` by agent type, one step a bar) through
the operations layer's Prometheus client (operations/prometheus.py, shared with
`agentjobs info`); the fallbacks are console/recorded_chart.py's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..operations import Minute
from ..operations.prometheus import (
    COMPLETED_COUNTER,
    FAILED_COUNTER,
    PrometheusSource,
    PrometheusUnavailable,
    agent_type_of,
    jobs,
    result_of,
    sample,
)

__all__ = [
    "COMPLETED_COUNTER",
    "FAILED_COUNTER",
    "ChartHistory",
    "PrometheusSource",
    "PrometheusUnavailable",
    "parse_increases",
    "prometheus_chart",
]

BARS = 60
"""Bars of a chart: an hour of minutes, or a day of 24-minute bars."""


@dataclass(frozen=True, slots=True)
class ChartHistory:
    """The bars the overview charts, and where they came from."""

    minutes: dict[str, tuple[Minute, ...]]
    """Per agent type, BARS bars of `bar_minutes` each, oldest first."""
    from_prometheus: bool
    problem: str | None = None
    """Why Prometheus' minutes are not shown although it is set (None: it answered, or
    it is not set)."""
    recorded: frozenset[str] = frozenset()
    """Types charted from the history the workers record in Redis (the others, when
    Prometheus is not shown, from this console's own readings)."""
    bar_minutes: int = 1


async def prometheus_chart(
    source: PrometheusSource,
    agent_types: Sequence[str],
    now: float,
    bar_minutes: int = 1,
) -> ChartHistory:
    """Prometheus' last BARS bars of `bar_minutes` (aligned to multiples of it) for
    `agent_types`; PrometheusUnavailable when it does not answer as asked."""
    wanted = sorted(agent_types)
    last = math.floor(now / 60 / bar_minutes)
    first = last - BARS + 1
    completed, failed = await asyncio.gather(
        _increases(source, COMPLETED_COUNTER, wanted, first, bar_minutes),
        _increases(source, FAILED_COUNTER, wanted, first, bar_minutes),
    )
    minutes = {
        agent_type: tuple(
            _bar(index, completed.get(agent_type, {}), failed.get(agent_type, {}), bar_minutes)
            for index in range(first, first + BARS)
        )
        for agent_type in wanted
    }
    return ChartHistory(minutes, from_prometheus=True, bar_minutes=bar_minutes)


def _bar(index: int, completed: Mapping[int, int], failed: Mapping[int, int], size: int) -> Minute:
    # A bar is known when Prometheus had the completed counter then (both come from
    # the same scrape); a missing failed point alone counts as none failed.
    covered = index in completed
    start = index * 60.0 * size
    return Minute(start, completed.get(index, 0), failed.get(index, 0), covered, size)


async def _increases(
    source: PrometheusSource, counter: str, agent_types: Sequence[str], first: int, size: int
) -> dict[str, dict[int, int]]:
    # Bar k is the increase over (k*w, (k+1)*w] (w its width): evaluated at its end.
    width = 60 * size
    params = {
        "query": source.query(counter, agent_types, f"{size}m"),
        "start": str((first + 1) * width),
        "end": str((first + BARS) * width),
        "step": str(width),
    }
    body = await source.fetch("/api/v1/query_range", params)
    return parse_increases(body, agent_types, first, size)


def parse_increases(
    body: bytes, agent_types: Sequence[str], first: int, bar_minutes: int = 1
) -> dict[str, dict[int, int]]:
    """A query_range answer as agent type -> bar index -> whole jobs, for the BARS bars
    of `bar_minutes` from bar `first` and only `agent_types`; anything else is
    PrometheusUnavailable."""
    wanted = set(agent_types)
    increases: dict[str, dict[int, int]] = {}
    for series in result_of(body, "matrix"):
        agent_type = agent_type_of(series)
        if agent_type not in wanted:
            continue
        points = increases.setdefault(agent_type, {})
        for point in series.get("values", ()):
            parsed = sample(point)
            if parsed is None:
                continue
            index = round(parsed[0] / (60 * bar_minutes)) - 1
            if first <= index < first + BARS:
                points[index] = jobs(parsed[1])
    return increases
