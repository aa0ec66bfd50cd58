"""The overview's chart: its source and its bars, the last hour per minute or the last
day in bars of 24 minutes.

Prometheus when it is set and answers (console/prometheus_history.py); else the history
the workers record in Redis (operations/recorded_history.py: one sample a minute, a
day); a type with no recorded sample yet (no worker of this release has run for it)
falls back to this console's own readings (operations.history), which cover the last
hour's minutes in which a page was open. The page says which source each chart shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum

from ..operations import Minute, Overview
from ..operations.history import grouped
from ..operations.recorded_history import HistoryReader, chart_minutes
from ..queue import JobQueue
from .prometheus_history import (
    BARS,
    ChartHistory,
    PrometheusSource,
    PrometheusUnavailable,
    prometheus_chart,
)

__all__ = ["ChartWindow", "overview_chart"]


class ChartWindow(StrEnum):
    """What the overview's chart spans (its `window` query)."""

    HOUR = "hour"
    DAY = "day"

    @property
    def bar_minutes(self) -> int:
        return 1 if self is ChartWindow.HOUR else 24 * 60 // BARS


async def overview_chart(
    queue: JobQueue,
    reader: HistoryReader,
    prometheus: PrometheusSource | None,
    overview: Overview,
    readings: Mapping[str, tuple[Minute, ...]],
    window: ChartWindow,
) -> ChartHistory:
    """The chart of every type of `overview` over `window`; `readings` are this
    console's own last hour, the last fallback."""
    size = window.bar_minutes
    names = [t.agent_type for t in overview.types]
    problem = None
    if prometheus is not None and names:
        try:
            return await prometheus_chart(prometheus, names, overview.read_at, size)
        except PrometheusUnavailable as exc:
            problem = str(exc)
    last_bar = math.floor(overview.read_at / 60 / size)
    first = (last_bar - BARS + 1) * size
    last = math.floor(overview.read_at / 60)
    # Bars are aligned to multiples of their width: the newest one is still filling.
    end = (last_bar + 1) * size - 1
    samples = await reader.read(queue, names, first, last)
    minutes: dict[str, tuple[Minute, ...]] = {}
    recorded = set()
    for queue_type in overview.types:
        name = queue_type.agent_type
        found = samples.get(name)
        if found:
            recorded.add(name)
            shown = chart_minutes(found, queue_type.totals, first, last)
        else:
            shown = readings.get(name, ())
        # Pad to whole bars: minutes before the readings' hour, and after now.
        known = {int(m.start // 60): m for m in shown}
        whole = tuple(
            known.get(index, Minute(index * 60.0, 0, 0, False)) for index in range(first, end + 1)
        )
        minutes[name] = grouped(whole, size)
    return ChartHistory(
        minutes, from_prometheus=False, problem=problem, recorded=frozenset(recorded),
        bar_minutes=size,
    )  # fmt: skip
