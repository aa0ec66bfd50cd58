"""`info`: each agent type's queue at a glance; `--watch` redraws it in place."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
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
WATCH = "watch"


@dataclass(frozen=True, slots=True)
class _LastMinute:
    """The last minute's counts shown, where they came from, and what went wrong."""

    counts: dict[str, Recent]
    """Per agent type; a type Prometheus has no series of is missing."""
    source: str | None
    """PROMETHEUS, WATCH (this watch's own readings) or None (totals shown instead)."""
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
    prometheus_url: PrometheusUrlOption = None,
    metrics_namespace: MetricsNamespaceOption = "",
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Per agent type: queued, running, delayed, dead, active workers, the oldest waiting
    job's age, jobs enqueued, completed and failed in the last minute, and how long it
    has been paused (`agentjobs pause`).

    The queue keeps running totals only. The last minute comes from the Prometheus that
    scrapes the exporter (--prometheus-url or AGENTJOBS_PROMETHEUS_URL): `max by
    (agent_type) (increase(jobs_<counter>_total[1m]))`. Without it, a single `info` shows
    the totals since the counters began (the columns say "total"); with --watch, the
    difference from this watch's reading of a minute ago, which until a minute has
    passed covers the time since the watch began (the table says how long). When
    Prometheus does not answer, a note on stderr says why and the table falls back to
    the totals (or the watch's readings): not a failure.

    JSON: each type's "totals", and "last_minute" ({enqueued, completed, failed,
    seconds, source}, or null); the document's "last_minute_source" is "prometheus",
    "watch" or null, and "prometheus_problem" says why Prometheus was not used.

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
        asyncio.run(_info(requested, watch, interval, count, source, output, redis_url))
    except KeyboardInterrupt:
        if not watch:
            raise
        # Ctrl-C is how a watch ends: a success, not an interruption.


HELP = help_text(info.__doc__)


async def _from_prometheus(
    source: PrometheusSource | None, overview: Overview
) -> _LastMinute | None:
    """Prometheus' last minute for the overview's types; None when no Prometheus is set."""
    if source is None:
        return None
    try:
        counts = await last_minute(source, [t.agent_type for t in overview.types])
    except PrometheusUnavailable as exc:
        return _LastMinute({}, None, f"Prometheus at {source.url} failed: {exc}")
    return _LastMinute({t: Recent(c, 60.0) for t, c in counts.items()}, PROMETHEUS)


def _note(last: _LastMinute | None, fallback: str) -> None:
    """Prometheus' failure, one line on stderr (stdout stays the table or the JSON)."""
    if last is not None and last.problem is not None:
        print(f"note: {last.problem}; showing {fallback}", file=sys.stderr)


async def _info(
    requested: list[str],
    watch: bool,
    interval: float,
    count: int | None,
    source: PrometheusSource | None,
    output: Output,
    redis_url: str | None,
) -> None:
    async with operator_queue(redis_url) as queue:
        listed = await agent_types(queue, requested)
        _notes(listed, None)
        if not watch:
            overview = await read_overview(queue, listed.names)
            last = await _from_prometheus(source, overview)
            _note(last, "the totals")
            if output == Output.JSON:
                print_json(_document(overview, last))
            else:
                stdout().print(_table(overview, last))
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
                last = await _from_prometheus(source, overview)
                if last is not None and last.problem is not None:
                    if last.problem != problem:  # one note per new cause, not per refresh
                        _note(last, "this watch's own readings")
                    problem = last.problem
                    last = _LastMinute(own.counts, WATCH, last.problem)
                else:
                    problem = None
                shown = own if last is None else last
                if live is not None:
                    live.update(_table(overview, shown), refresh=True)
                else:
                    print_json(_document(overview, shown), one_line=True)
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


def _document(overview: Overview, last: _LastMinute | None) -> dict[str, Any]:
    document: dict[str, Any] = jsonable(overview)
    source = None if last is None else last.source
    for entry in document["types"]:
        recent = None if last is None else last.counts.get(entry["agent_type"])
        entry["last_minute"] = (
            None
            if recent is None
            else {**jsonable(recent.counts), "seconds": recent.seconds, "source": source}
        )
    document["last_minute_source"] = source
    document["prometheus_problem"] = None if last is None else last.problem
    return document


def _table(overview: Overview, last: _LastMinute | None) -> Table:
    recent = None if last is None or last.source is None else last
    table = Table(caption=_caption(recent), caption_justify="left")
    table.add_column("TYPE", no_wrap=True)
    for name in ("QUEUED", "RUNNING", "DELAYED", "DEAD", "WORKERS", "OLDEST WAITING"):
        table.add_column(name, justify="right")
    window = "total" if recent is None else "1m"
    for name in ("ENQUEUED", "COMPLETED", "FAILED"):
        table.add_column(f"{name} ({window})", justify="right")
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


def _caption(last: _LastMinute | None) -> str:
    if last is None:
        return (
            "Counts are totals since the counters began; --prometheus-url (or "
            "AGENTJOBS_PROMETHEUS_URL) shows the last minute, as --watch does over its run."
        )
    if last.source == PROMETHEUS:
        return (
            f"Counts over the last minute, from Prometheus ({NONE}: no series of that type there)."
        )
    span = max((r.seconds for r in last.counts.values()), default=0.0)
    if span == 0:
        return "Last-minute counts start at the next refresh."
    if span < RecentCounts.WINDOW:
        return f"Counts over the {span:.0f} s since the watch began (a minute once it has run one)."
    return f"Counts over the last {span:.0f} s. Ctrl-C stops."
