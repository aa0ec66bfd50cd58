"""The overview's last hour per minute from Prometheus, when the console is given its URL.

The console's own readings (operations.history) cover only the minutes a page was open;
Prometheus has scraped the exporter's counters all along, so it can fill every minute.
Two range queries (`increase(<counter>[1m])` by agent type, step 60 s, the last hour)
through the operations layer's Prometheus client (operations/prometheus.py, shared with
`agentjobs info`); when Prometheus is not set or does not answer, the chart falls back
to the readings and the page says which source it shows.
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
    "last_hour",
    "parse_increases",
]

MINUTES = 60


@dataclass(frozen=True, slots=True)
class ChartHistory:
    """The minutes the overview charts, and where they came from."""

    minutes: dict[str, tuple[Minute, ...]]
    from_prometheus: bool
    problem: str | None = None
    """Why Prometheus' minutes are not shown although it is set (None: it answered, or
    it is not set)."""


async def last_hour(
    source: PrometheusSource | None,
    readings: Mapping[str, tuple[Minute, ...]],
    now: float,
) -> ChartHistory:
    """Prometheus' last hour for the types of `readings`, else `readings` themselves."""
    if source is None or not readings:
        return ChartHistory(dict(readings), from_prometheus=False)
    agent_types = sorted(readings)
    last = math.floor(now / 60)
    first = last - MINUTES + 1
    try:
        completed, failed = await asyncio.gather(
            _increases(source, COMPLETED_COUNTER, agent_types, first),
            _increases(source, FAILED_COUNTER, agent_types, first),
        )
    except PrometheusUnavailable as exc:
        return ChartHistory(dict(readings), from_prometheus=False, problem=str(exc))
    minutes = {
        agent_type: tuple(
            _minute(index, completed.get(agent_type, {}), failed.get(agent_type, {}))
            for index in range(first, first + MINUTES)
        )
        for agent_type in agent_types
    }
    return ChartHistory(minutes, from_prometheus=True)


def _minute(index: int, completed: Mapping[int, int], failed: Mapping[int, int]) -> Minute:
    # A minute is known when Prometheus had the completed counter then (both come from
    # the same scrape); a missing failed point alone counts as none failed.
    covered = index in completed
    return Minute(index * 60.0, completed.get(index, 0), failed.get(index, 0), covered)


async def _increases(
    source: PrometheusSource, counter: str, agent_types: Sequence[str], first: int
) -> dict[str, dict[int, int]]:
    # Minute k is the increase over (k*60, (k+1)*60]: evaluated at the minute's end.
    params = {
        "query": source.query(counter, agent_types),
        "start": str((first + 1) * 60),
        "end": str((first + MINUTES) * 60),
        "step": "60",
    }
    body = await source.fetch("/api/v1/query_range", params)
    return parse_increases(body, agent_types, first)


def parse_increases(
    body: bytes, agent_types: Sequence[str], first: int
) -> dict[str, dict[int, int]]:
    """A query_range answer as agent type -> minute index -> whole jobs, for the hour
    from minute `first` and only `agent_types`; anything else is PrometheusUnavailable."""
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
            index = round(parsed[0] / 60) - 1
            if first <= index < first + MINUTES:
                points[index] = jobs(parsed[1])
    return increases
