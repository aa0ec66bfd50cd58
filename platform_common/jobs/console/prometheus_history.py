"""The overview's last hour per minute from Prometheus, when the console is given its URL.

The console's own readings (operations.history) cover only the minutes a page was open;
Prometheus has scraped the exporter's counters all along, so it can fill every minute.
Two range queries (`increase(<counter>[1m])` by agent type, step 60 s, the last hour)
with a short timeout; when Prometheus is not set or does not answer, the chart falls
back to the readings and the page says which source it shows.

The query is `max by (agent_type)`: every exporter replica reads the same Redis, so
their series count the same jobs and a sum would count them once per replica.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from ..operations import Minute

__all__ = [
    "COMPLETED_COUNTER",
    "FAILED_COUNTER",
    "ChartHistory",
    "PrometheusSource",
    "PrometheusUnavailable",
    "last_hour",
    "parse_increases",
]

COMPLETED_COUNTER = "jobs_completed_total"
FAILED_COUNTER = "jobs_failed_total"
"""The exporter's counters (its catalogue; a test keeps these names equal to it)."""

MINUTES = 60
MAX_RESPONSE_BYTES = 1 << 20
"""60 points for each shown type are a few KiB a type: anything far larger is not ours."""
_NAMESPACE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class PrometheusUnavailable(Exception):
    """Prometheus did not answer, or not with a range-query matrix (the message says)."""


@dataclass(frozen=True, slots=True)
class PrometheusSource:
    """The Prometheus that scrapes the queue exporter."""

    url: str
    """Its base, e.g. http://prometheus:9090 (the API is <url>/api/v1/query_range)."""
    namespace: str = ""
    """The exporter's metric name prefix (its --namespace); empty: the plain names."""
    timeout_seconds: float = 2.0
    """Per query: the overview waits at most about twice this for the chart."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"PrometheusSource.url must be an http(s) URL, got {self.url!r}")
        if self.namespace and not _NAMESPACE.fullmatch(self.namespace):
            raise ValueError(
                f"PrometheusSource.namespace is not a metric prefix: {self.namespace!r}"
            )
        if not (isinstance(self.timeout_seconds, int | float) and 0 < self.timeout_seconds <= 30):
            raise ValueError(
                f"PrometheusSource.timeout_seconds must be in (0, 30], got {self.timeout_seconds!r}"
            )

    def metric(self, counter: str) -> str:
        return f"{self.namespace}_{counter}" if self.namespace else counter

    def query(self, counter: str, agent_types: Sequence[str]) -> str:
        """Per-minute increases of `counter` for exactly `agent_types` (a bounded answer)."""
        # Agent type names are [a-z0-9_.-]: only '.' is a regex operator. `\\.` in a
        # PromQL string is the regex `\.`.
        alternatives = "|".join(name.replace(".", "\\\\.") for name in agent_types)
        selector = f'{self.metric(counter)}{{agent_type=~"{alternatives}"}}'
        return f"max by (agent_type) (increase({selector}[1m]))"


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
        "timeout": f"{max(1, round(source.timeout_seconds * 1000))}ms",
    }
    url = f"{source.url.rstrip('/')}/api/v1/query_range?{urlencode(params)}"
    try:
        # urllib in a thread: the console needs no HTTP client library for two GETs.
        # The outer bound also covers a slow name lookup, which urllib's timeout does not.
        body = await asyncio.wait_for(
            asyncio.to_thread(_get, url, source.timeout_seconds),
            source.timeout_seconds + 1,
        )
    except TimeoutError:
        raise PrometheusUnavailable(f"no answer within {source.timeout_seconds}s") from None
    return parse_increases(body, agent_types, first)


def _get(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        # Prometheus answers a bad query with 400 and a JSON error: show its message.
        body = exc.read(MAX_RESPONSE_BYTES + 1)
        try:
            reason = json.loads(body).get("error") or exc.reason
        except (ValueError, AttributeError):
            reason = exc.reason
        raise PrometheusUnavailable(f"HTTP {exc.code}: {reason}") from None
    except (OSError, ValueError) as exc:
        raise PrometheusUnavailable(f"cannot reach it: {exc}") from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise PrometheusUnavailable(f"answer larger than {MAX_RESPONSE_BYTES} bytes")
    return body


def parse_increases(
    body: bytes, agent_types: Sequence[str], first: int
) -> dict[str, dict[int, int]]:
    """A query_range answer as agent type -> minute index -> whole jobs, for the hour
    from minute `first` and only `agent_types`; anything else is PrometheusUnavailable."""
    try:
        document = json.loads(body)
    except ValueError:
        raise PrometheusUnavailable("the answer is not JSON") from None
    if not isinstance(document, dict) or document.get("status") != "success":
        error = document.get("error") if isinstance(document, dict) else None
        raise PrometheusUnavailable(f"the query failed: {error or 'no success status'}")
    data = document.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise PrometheusUnavailable("the answer is not a range-query matrix")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusUnavailable("the answer's result is not a list")
    wanted = set(agent_types)
    increases: dict[str, dict[int, int]] = {}
    for series in result:
        agent_type = _agent_type(series)
        if agent_type not in wanted:
            continue
        points = increases.setdefault(agent_type, {})
        for point in series.get("values", ()):
            parsed = _point(point)
            if parsed is None:
                continue
            index, count = parsed
            if first <= index < first + MINUTES:
                points[index] = count
    return increases


def _agent_type(series: Any) -> str | None:
    if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
        raise PrometheusUnavailable("a series of the answer has no labels")
    value = series["metric"].get("agent_type")
    return value if isinstance(value, str) else None


def _point(point: Any) -> tuple[int, int] | None:
    """(minute index, jobs) of one [time, "value"] pair; None for NaN or infinity."""
    if not isinstance(point, list) or len(point) != 2:
        raise PrometheusUnavailable(f"not a [time, value] point: {point!r:.80}")
    try:
        at, value = float(point[0]), float(point[1])
    except (TypeError, ValueError):
        raise PrometheusUnavailable(f"not a [time, value] point: {point!r:.80}") from None
    if not (math.isfinite(at) and math.isfinite(value)):
        return None
    # increase() extrapolates to the window's edges: a fraction of a job is a rounding.
    return round(at / 60) - 1, max(0, round(value))
