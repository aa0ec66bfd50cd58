"""`info`: each agent type's queue at a glance, with the counts of the last minute, hour
or day (`--window`); `--watch` redraws it in place."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from ..operations import (
    AgentTypes,
    Counts,
    Overview,
    Recent,
    RecentCounts,
    TypeOverview,
    agent_types,
    operator_queue,
    read_overview,
)
from ..operations.prometheus import PrometheusSource, PrometheusUnavailable, last_minute
from ..operations.recorded_history import HistoryReader, window_counts, window_minutes
from ..queue import JobQueue
from .exits import EXIT_USAGE, PROMETHEUS_URL_ENV, CliError
from .operator_output import (
    NONE,
    Output,
    OutputOption,
    RedisUrlOption,
    age,
    help_text,
    jsonable,
    print_json,
    stdout,
)

__all__ = ["HELP", "MetricsNamespaceOption", "PrometheusUrlOption", "info"]

PrometheusUrlOption = Annotated[
    str | None,
    typer.Option(
        "--prometheus-url",
        envvar=PROMETHEUS_URL_ENV,
        help="The Prometheus scraping the queue exporter, e.g. http://prometheus:9090.",
        show_default=False,
    ),
]
MetricsNamespaceOption = Annotated[
    str,
    typer.Option(
        "--metrics-namespace",
        help="The exporter's metric name prefix (its --namespace), for --prometheus-url.",
    ),
]

PROMETHEUS = "prometheus"
HISTORY = "history"
WATCH = "watch"


class Window(StrEnum):
    """The span of the recent counts (a PromQL duration, as Prometheus is asked)."""

    MINUTE = "1m"
    HOUR = "1h"
    DAY = "1d"

    @property
    def seconds(self) -> float:
        return {"1m": 60.0, "1h": 3600.0, "1d": 86400.0}[self.value]

    @property
    def named(self) -> str:
        return {"1m": "minute", "1h": "hour", "1d": "day"}[self.value]


@dataclass(frozen=True, slots=True)
class _LastMinute:
    """The last minute's counts shown, where they came from, and what went wrong."""

    counts: dict[str, Recent]
    """Per agent type; a type Prometheus has no series of is missing."""
    source: str | None
    """PROMETHEUS, HISTORY (the history the workers record in Redis), WATCH (this
    watch's own readings) or None (totals shown instead)."""
    problem: str | None = None
    """Why Prometheus' counts are not shown although it was given."""


def info(
    types: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TYPE",
            help="Agent types (default: every configured one, then every one Redis has "
            "seen, as the exporter finds them).",
            show_default=False,
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Refresh in place until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between refreshes (--watch).")
    ] = 2.0,
    count: Annotated[
        int | None,
        typer.Option(
            "--count", min=1, help="Stop after this many refreshes (--watch).", show_default=False
        ),
    ] = None,
    window: Annotated[
        Window,
        typer.Option("--window", help="The span of the ENQUEUED, COMPLETED and FAILED counts."),
    ] = Window.MINUTE,
    prometheus_url: PrometheusUrlOption = None,
    metrics_namespace: MetricsNamespaceOption = "",
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Per agent type: queued, running, delayed, dead, active workers, the oldest waiting
    job's age, jobs enqueued, completed and failed in the last minute (--window 1h: hour,
    1d: day), and how long it has been paused (`agentjobs pause`).

    The counts come from the Prometheus that scrapes the exporter (--prometheus-url or
    AGENTJOBS_PROMETHEUS_URL): `max by (agent_type) (increase(jobs_<counter>_total[1m]))`
    (or [1h], [1d]). Without it, from the history the workers record in Redis (one sample
    of the counters a minute, kept a day): the counters now less the sample of a window
    ago, so the span is the window to a minute more, or what the history holds when it
    is younger (the caption says how long; a type without samples, or whose counters were
    reset within the window, shows none). With --watch and the 1m window, the difference
    from this watch's reading of a minute ago instead (the table says how long). With
    neither (no worker has recorded a sample yet), the totals since the counters began
    (the columns say "total"). When Prometheus does not answer, a note on stderr says
    why and the table falls back as without it: not a failure.

    JSON: each type's "totals", and "last_minute" (the counts of the window, whatever
    it is: {enqueued, completed, failed, seconds, source}, or null); the document's
    "window", its "last_minute_source" ("prometheus", "history", "watch" or null), and
    "prometheus_problem", which says why Prometheus was not used.

    Without TYPE: every configured agent type (QUEUE_AGENT_TYPES), then every one Redis
    has seen (a producer or worker of it registered it: what the exporter exports), at
    most 200; a note on stderr names any this Redis user may not read. With --watch, a
    type that appears meanwhile is added.

    A worker is active while its last heartbeat is within 6 heartbeat intervals
    (QUEUE_HEARTBEAT_INTERVAL; 30 s by default). --output json with --watch prints one
    JSON document per line, one line per refresh.
    """
    requested = types or []
    try:
        source = (
            None if prometheus_url is None else PrometheusSource(prometheus_url, metrics_namespace)
        )
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    try:
        asyncio.run(_info(requested, watch, interval, count, source, window, output, redis_url))
    except KeyboardInterrupt:
        if not watch:
            raise
        # Ctrl-C is how a watch ends: a success, not an interruption.


HELP = help_text(info.__doc__)


async def _from_prometheus(
    source: PrometheusSource | None, overview: Overview, window: Window
) -> _LastMinute | None:
    """Prometheus' counts of `window` for the overview's types; None when no Prometheus
    is set."""
    if source is None:
        return None
    try:
        counts = await last_minute(source, [t.agent_type for t in overview.types], window.value)
    except PrometheusUnavailable as exc:
        return _LastMinute({}, None, f"Prometheus at {source.url} failed: {exc}")
    return _LastMinute({t: Recent(c, window.seconds) for t, c in counts.items()}, PROMETHEUS)


async def _from_history(
    queue: JobQueue, reader: HistoryReader, overview: Overview, window: Window
) -> _LastMinute | None:
    """The recorded history's counts of `window`; None when no type has a sample in it."""
    now = overview.read_at
    first, last = window_minutes(now, window.seconds)
    samples = await reader.read(queue, [t.agent_type for t in overview.types], first, last)
    counts = {}
    for queue_type in overview.types:
        recent = window_counts(
            samples.get(queue_type.agent_type, {}), queue_type.totals, now, window.seconds
        )
        if recent is not None:
            counts[queue_type.agent_type] = recent
    if not any(samples.values()):
        return None
    return _LastMinute(counts, HISTORY)


_FALLBACKS = {HISTORY: "the recorded history", WATCH: "this watch's own readings"}


def _note(last: _LastMinute) -> None:
    """Prometheus' failure and what is shown instead, one line on stderr (stdout stays
    the table or the JSON)."""
    fallback = _FALLBACKS.get(last.source or "", "the totals")
    print(f"note: {last.problem}; showing {fallback}", file=sys.stderr)


async def _info(
    requested: list[str],
    watch: bool,
    interval: float,
    count: int | None,
    source: PrometheusSource | None,
    window: Window,
    output: Output,
    redis_url: str | None,
) -> None:
    reader = HistoryReader()

    async def counts(overview: Overview, own: _LastMinute | None) -> _LastMinute | None:
        """Prometheus' counts; when it is not set or fails, the watch's own readings (the
        last minute's best measure) or the history, with Prometheus' problem."""
        last = await _from_prometheus(source, overview, window)
        failed = None if last is None else last.problem
        if last is not None and failed is None:
            return last
        if own is not None and window is Window.MINUTE:
            fallback: _LastMinute | None = own
        else:
            fallback = await _from_history(queue, reader, overview, window) or own
        if failed is None:
            return fallback
        if fallback is None:
            return _LastMinute({}, None, failed)
        return _LastMinute(fallback.counts, fallback.source, failed)

    async with operator_queue(redis_url) as queue:
        listed = await agent_types(queue, requested)
        _notes(listed, None)
        if not watch:
            overview = await read_overview(queue, listed.names)
            shown = await counts(overview, None)
            if shown is not None and shown.problem is not None:
                _note(shown)
            if output == Output.JSON:
                print_json(_document(overview, shown, window))
            else:
                stdout().print(_table(overview, shown, window))
            return
        recent_counts = RecentCounts()
        console = stdout()
        live = Live(console=console, auto_refresh=False) if output == Output.TABLE else None
        refreshes = 0
        problem = None
        try:
            if live is not None:
                live.start()
            while True:
                if refreshes:  # a type that appears while it watches is shown too
                    listed = _notes(await agent_types(queue, requested), listed)
                overview = await read_overview(queue, listed.names)
                # The watch's own readings go on while Prometheus answers: the fallback.
                own = _LastMinute(recent_counts.add(overview), WATCH)
                shown = await counts(overview, own)
                shown_problem = None if shown is None else shown.problem
                if shown is not None and shown_problem not in (None, problem):
                    _note(shown)  # one note per new cause, not per refresh
                problem = shown_problem
                if live is not None:
                    live.update(_table(overview, shown, window), refresh=True)
                else:
                    print_json(_document(overview, shown, window), one_line=True)
                refreshes += 1
                if count is not None and refreshes >= count:
                    return
                await asyncio.sleep(interval)
        finally:
            if live is not None:
                live.stop()


def _notes(listed: AgentTypes, before: AgentTypes | None) -> AgentTypes:
    """What the listing left out, on stderr (once, not on every refresh)."""
    if before is None or listed.notes() != before.notes():
        for note in listed.notes():
            print(f"note: {note}", file=sys.stderr)
    return listed


def _document(overview: Overview, last: _LastMinute | None, window: Window) -> dict[str, Any]:
    document: dict[str, Any] = jsonable(overview)
    source = None if last is None else last.source
    for entry in document["types"]:
        recent = None if last is None else last.counts.get(entry["agent_type"])
        entry["last_minute"] = (
            None
            if recent is None
            else {**jsonable(recent.counts), "seconds": recent.seconds, "source": source}
        )
    document["window"] = window.value
    document["last_minute_source"] = source
    document["prometheus_problem"] = None if last is None else last.problem
    return document


def _table(overview: Overview, last: _LastMinute | None, window: Window) -> Table:
    recent = None if last is None or last.source is None else last
    table = Table(caption=_caption(recent, window), caption_justify="left")
    table.add_column("TYPE", no_wrap=True)
    for name in ("QUEUED", "RUNNING", "DELAYED", "DEAD", "WORKERS", "OLDEST WAITING"):
        table.add_column(name, justify="right")
    span = "total" if recent is None else window.value
    for name in ("ENQUEUED", "COMPLETED", "FAILED"):
        table.add_column(f"{name} ({span})", justify="right")
    table.add_column("PAUSED", justify="right")
    for queue in overview.types:
        counts: Counts | None = queue.totals
        if recent is not None:
            minute = recent.counts.get(queue.agent_type)
            counts = None if minute is None else minute.counts
        table.add_row(
            queue.agent_type,
            f"{queue.queued:,}" + (f" ({queue.queued_levels})" if queue.queued_levels else ""),
            f"{queue.running:,}",
            f"{queue.delayed:,}",
            f"{queue.dead:,}",
            f"{queue.active_workers:,}",
            age(queue.oldest_waiting_seconds),
            *(
                (NONE, NONE, NONE)
                if counts is None
                else (f"{counts.enqueued:,}", f"{counts.completed:,}", f"{counts.failed:,}")
            ),
            _paused(queue, overview.read_at),
        )
    return table


def _paused(queue: TypeOverview, now: float) -> str:
    """How long the type has been paused, NONE while it runs."""
    if not queue.paused:
        return NONE
    if queue.paused_since is None:
        return "yes"
    return f"for {age(max(0.0, now - queue.paused_since))}"


def _caption(last: _LastMinute | None, window: Window) -> str:
    if last is None:
        return (
            "Counts are totals since the counters began: no worker has recorded the history "
            "yet; --prometheus-url (or AGENTJOBS_PROMETHEUS_URL) shows the last minute, as "
            "--watch does over its run."
        )
    if last.source == PROMETHEUS:
        return (
            f"Counts over the last {window.named}, from Prometheus ({NONE}: no series of that "
            "type there)."
        )
    span = max((r.seconds for r in last.counts.values()), default=0.0)
    if last.source == HISTORY:
        return (
            f"Counts over the last {age(span)}, from the history the workers record in Redis "
            f"({NONE}: no sample of that type then, or its counters were reset)."
        )
    if span == 0:
        return "Last-minute counts start at the next refresh."
    if span < RecentCounts.WINDOW:
        return f"Counts over the {span:.0f} s since the watch began (a minute once it has run one)."
    return f"Counts over the last {span:.0f} s. Ctrl-C stops."
