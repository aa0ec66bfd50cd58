"""The Prometheus that scrapes the queue exporter: its counters' increases, read over its
HTTP API. The console charts the last hour from it (console/prometheus_history.py) and
`agentjobs info --prometheus-url` shows the last minute.

Why Prometheus: the queue keeps running totals only (keys.STATS_COUNTERS), never a time
series, and adding per-minute counters to the scripts would cost Redis work on every
job. Prometheus has scraped those totals all along, so it knows any window's increase.

Every query is `max by (agent_type) (increase(<counter>{agent_type=~...}[1m]))`: every
exporter replica reads the same Redis, so their series count the same jobs and a sum
would count them once per replica. Queries have a short timeout and an answer size
bound; any failure is PrometheusUnavailable, whose message names the cause.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from ..metric_catalogue import by_key
from .overview import Counts

__all__ = [
    "COMPLETED_COUNTER",
    "ENQUEUED_COUNTER",
    "FAILED_COUNTER",
    "MAX_RESPONSE_BYTES",
    "PrometheusSource",
    "PrometheusUnavailable",
    "get",
    "last_minute",
    "parse_last_minute",
]

ENQUEUED_COUNTER = by_key("enqueued").name
COMPLETED_COUNTER = by_key("completed").name
FAILED_COUNTER = by_key("failed").name
"""The exporter's counters, as the metric catalogue names them."""

MAX_RESPONSE_BYTES = 1 << 20
"""A few KiB a shown type at most: anything far larger is not an answer to our queries."""
_NAMESPACE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class PrometheusUnavailable(Exception):
    """Prometheus did not answer, or not with the answer asked for (the message says)."""


@dataclass(frozen=True, slots=True)
class PrometheusSource:
    """The Prometheus that scrapes the queue exporter."""

    url: str
    """Its base, e.g. http://prometheus:9090 (the API is <url>/api/v1/...)."""
    namespace: str = ""
    """The exporter's metric name prefix (its --namespace); empty: the plain names."""
    timeout_seconds: float = 2.0
    """Per query: a reader waits at most about this plus a second for an answer."""

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

    def query(self, counter: str, agent_types: Sequence[str], window: str = "1m") -> str:
        """Increases of `counter` over `window` (a PromQL duration) for exactly
        `agent_types` (a bounded answer)."""
        # Agent type names are [a-z0-9_.-]: only '.' is a regex operator. `\\.` in a
        # PromQL string is the regex `\.`.
        alternatives = "|".join(name.replace(".", "\\\\.") for name in agent_types)
        selector = f'{self.metric(counter)}{{agent_type=~"{alternatives}"}}'
        return f"max by (agent_type) (increase({selector}[{window}]))"

    async def fetch(self, path: str, params: dict[str, str]) -> bytes:
        """GET <url><path>?<params> (with the query timeout); the body of a 200 answer."""
        params = {**params, "timeout": f"{max(1, round(self.timeout_seconds * 1000))}ms"}
        url = f"{self.url.rstrip('/')}{path}?{urlencode(params)}"
        try:
            # urllib in a thread: a few GETs need no HTTP client library. The outer bound
            # also covers a slow name lookup, which urllib's timeout does not.
            return await asyncio.wait_for(
                asyncio.to_thread(get, url, self.timeout_seconds), self.timeout_seconds + 1
            )
        except TimeoutError:
            raise PrometheusUnavailable(f"no answer within {self.timeout_seconds}s") from None


def get(url: str, timeout: float) -> bytes:
    """The body of a GET of `url`; PrometheusUnavailable naming why there is none."""
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


def result_of(body: bytes, result_type: str) -> list[Any]:
    """The `data.result` list of a successful API answer of `result_type` ("matrix" for a
    range query, "vector" for an instant one); anything else PrometheusUnavailable."""
    try:
        document = json.loads(body)
    except ValueError:
        raise PrometheusUnavailable("the answer is not JSON") from None
    if not isinstance(document, dict) or document.get("status") != "success":
        error = document.get("error") if isinstance(document, dict) else None
        raise PrometheusUnavailable(f"the query failed: {error or 'no success status'}")
    data = document.get("data")
    if not isinstance(data, dict) or data.get("resultType") != result_type:
        kind = "range-query matrix" if result_type == "matrix" else f"{result_type}"
        raise PrometheusUnavailable(f"the answer is not a {kind}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusUnavailable("the answer's result is not a list")
    return result


def agent_type_of(series: Any) -> str | None:
    """The `agent_type` label of one series of an answer (None if it has none)."""
    if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
        raise PrometheusUnavailable("a series of the answer has no labels")
    value = series["metric"].get("agent_type")
    return value if isinstance(value, str) else None


def sample(point: Any) -> tuple[float, float] | None:
    """(time, value) of one [time, "value"] pair; None for NaN or infinity."""
    if not isinstance(point, list) or len(point) != 2:
        raise PrometheusUnavailable(f"not a [time, value] point: {point!r:.80}")
    try:
        at, value = float(point[0]), float(point[1])
    except (TypeError, ValueError):
        raise PrometheusUnavailable(f"not a [time, value] point: {point!r:.80}") from None
    if not (math.isfinite(at) and math.isfinite(value)):
        return None
    return at, value


def jobs(value: float) -> int:
    # increase() extrapolates to the window's edges: a fraction of a job is a rounding.
    return max(0, round(value))


_LAST_MINUTE = (("enqueued", ENQUEUED_COUNTER), ("completed", COMPLETED_COUNTER),
                ("failed", FAILED_COUNTER))  # fmt: skip


async def last_minute(
    source: PrometheusSource, agent_types: Sequence[str], window: str = "1m"
) -> dict[str, Counts]:
    """Jobs enqueued, completed and failed in the last minute (or `window`, a PromQL
    duration), per agent type, from three instant queries: only the types Prometheus has
    the counters of (a type it has never scraped is left out, not reported as 0)."""
    if not agent_types:
        return {}
    wanted = sorted(set(agent_types))
    bodies = await asyncio.gather(
        *(
            source.fetch("/api/v1/query", {"query": source.query(counter, wanted, window)})
            for _, counter in _LAST_MINUTE
        )
    )
    return parse_last_minute(bodies, wanted)


def parse_last_minute(bodies: Sequence[bytes], agent_types: Sequence[str]) -> dict[str, Counts]:
    """The instant-query answers of last_minute (enqueued, completed, failed, in that
    order) as Counts per agent type; a type is included when Prometheus has any of its
    counters (they come from the same scrape; a missing one counts 0)."""
    wanted = set(agent_types)
    per_counter: list[dict[str, int]] = []
    for body in bodies:
        counts: dict[str, int] = {}
        for series in result_of(body, "vector"):
            agent_type = agent_type_of(series)
            if agent_type not in wanted:
                continue
            point = sample(series.get("value"))
            if point is not None:
                counts[agent_type] = jobs(point[1])
        per_counter.append(counts)
    enqueued, completed, failed = per_counter
    known = sorted(set(enqueued) | set(completed) | set(failed))
    return {
        agent_type: Counts(
            enqueued.get(agent_type, 0), completed.get(agent_type, 0), failed.get(agent_type, 0)
        )
        for agent_type in known
    }
