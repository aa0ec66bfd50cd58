"""`info`: each agent type's queue at a glance; `--watch` redraws it in place."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from ..operations import Overview, Recent, RecentCounts, agent_types, operator_queue, read_overview
from .operator_output import (
    Output,
    OutputOption,
    RedisUrlOption,
    age,
    help_text,
    jsonable,
    print_json,
    stdout,
)

__all__ = ["HELP", "info"]


def info(
    types: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TYPE",
            help="Agent types (default: every configured one).",
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
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Per agent type: queued, running, delayed, dead, active workers, the oldest waiting
    job's age, and jobs enqueued, completed and failed.

    The queue keeps running totals only, so a single `info` shows the totals (since the
    queue's counters began). With --watch, the last three columns are the last minute:
    the difference from the reading of a minute ago, kept while watching; until a minute
    has passed they cover the time since the watch began, and the table says how long
    (JSON: "last_minute": {..., "seconds": span}). For rates over any window without
    watching, use the exporter's counters in Prometheus.

    A worker is active while its last heartbeat is within 6 heartbeat intervals
    (QUEUE_HEARTBEAT_INTERVAL; 30 s by default). --output json with --watch prints one
    JSON document per line, one line per refresh.
    """
    requested = types or []
    try:
        asyncio.run(_info(requested, watch, interval, count, output, redis_url))
    except KeyboardInterrupt:
        if not watch:
            raise
        # Ctrl-C is how a watch ends: a success, not an interruption.


HELP = help_text(info.__doc__)


async def _info(
    requested: list[str],
    watch: bool,
    interval: float,
    count: int | None,
    output: Output,
    redis_url: str | None,
) -> None:
    async with operator_queue(redis_url) as queue:
        chosen = agent_types(queue, requested)
        if not watch:
            overview = await read_overview(queue, chosen)
            if output == Output.JSON:
                print_json(_document(overview, None))
            else:
                stdout().print(_table(overview, None))
            return
        recent_counts = RecentCounts()
        console = stdout()
        live = Live(console=console, auto_refresh=False) if output == Output.TABLE else None
        refreshes = 0
        try:
            if live is not None:
                live.start()
            while True:
                overview = await read_overview(queue, chosen)
                recent = recent_counts.add(overview)
                if live is not None:
                    live.update(_table(overview, recent), refresh=True)
                else:
                    print_json(_document(overview, recent), one_line=True)
                refreshes += 1
                if count is not None and refreshes >= count:
                    return
                await asyncio.sleep(interval)
        finally:
            if live is not None:
                live.stop()


def _document(overview: Overview, recent: dict[str, Recent] | None) -> dict[str, Any]:
    document: dict[str, Any] = jsonable(overview)
    for entry in document["types"]:
        last = None if recent is None else recent[entry["agent_type"]]
        entry["last_minute"] = (
            None if last is None else {**jsonable(last.counts), "seconds": last.seconds}
        )
    return document


def _table(overview: Overview, recent: dict[str, Recent] | None) -> Table:
    table = Table(caption=_caption(recent), caption_justify="left")
    table.add_column("TYPE", no_wrap=True)
    for name in ("QUEUED", "RUNNING", "DELAYED", "DEAD", "WORKERS", "OLDEST WAITING"):
        table.add_column(name, justify="right")
    window = "total" if recent is None else "1m"
    for name in ("ENQUEUED", "COMPLETED", "FAILED"):
        table.add_column(f"{name} ({window})", justify="right")
    for queue in overview.types:
        counts = queue.totals if recent is None else recent[queue.agent_type].counts
        table.add_row(
            queue.agent_type,
            f"{queue.queued:,}",
            f"{queue.running:,}",
            f"{queue.delayed:,}",
            f"{queue.dead:,}",
            f"{queue.active_workers:,}",
            age(queue.oldest_waiting_seconds),
            f"{counts.enqueued:,}",
            f"{counts.completed:,}",
            f"{counts.failed:,}",
        )
    return table


def _caption(recent: dict[str, Recent] | None) -> str:
    if recent is None:
        return "Counts are totals since the counters began; --watch shows the last minute."
    span = max((r.seconds for r in recent.values()), default=0.0)
    if span == 0:
        return "Last-minute counts start at the next refresh."
    if span < RecentCounts.WINDOW:
        return f"Counts over the {span:.0f} s since the watch began (a minute once it has run one)."
    return f"Counts over the last {span:.0f} s. Ctrl-C stops."
