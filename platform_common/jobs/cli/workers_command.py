"""`workers`: each worker's id, host, last heartbeat and the jobs it is running."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from ..operations import WorkersReport, agent_types, read_workers
from ..queue import JobQueue
from .operator_output import (
    NONE,
    Output,
    OutputOption,
    RedisUrlOption,
    age,
    help_text,
    print_json,
    stdout,
    text,
    with_queue,
)

__all__ = ["HELP", "workers"]


def workers(
    agent_type: Annotated[
        str | None,
        typer.Argument(
            metavar="TYPE",
            help="One agent type (default: every configured one, then every one Redis has seen).",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Each worker's id, host, last heartbeat, the jobs it is running and its concurrency.

    Workers are listed from their heartbeats (a worker silent for 10 heartbeat intervals
    is forgotten) and from the jobs they hold; ACTIVE means a heartbeat within 6
    intervals. The host is read from the default worker id (host:pid:random); an id
    given with --worker-id shows none.
    """

    async def read(queue: JobQueue) -> WorkersReport:
        listed = await agent_types(queue, [agent_type] if agent_type else [])
        for note in listed.notes():
            print(f"note: {note}", file=sys.stderr)
        return await read_workers(queue, listed.names)

    report = with_queue(redis_url, read)
    if output == Output.JSON:
        print_json(report)
        return
    table = Table(caption=_caption(report), caption_justify="left")
    names = ("TYPE", "WORKER", "HOST", "LAST HEARTBEAT", "ACTIVE", "JOBS", "CONCURRENCY", "JOB IDS")
    for name in names:
        table.add_column(name, justify="right" if name in ("JOBS", "CONCURRENCY") else "left")
    for worker in report.workers:
        jobs = worker.jobs_in_progress
        shown = ", ".join(jobs[:3]) + (f" (+{len(jobs) - 3})" if len(jobs) > 3 else "")
        table.add_row(
            worker.agent_type,
            text(worker.worker_id),
            text(worker.host or NONE),
            NONE
            if worker.heartbeat_age_seconds is None
            else f"{age(worker.heartbeat_age_seconds)} ago",
            "yes" if worker.active else "no",
            str(len(jobs)),
            NONE if worker.concurrency is None else str(worker.concurrency),
            text(shown or NONE),
        )
    stdout().print(table)


HELP = help_text(workers.__doc__)


def _caption(report: WorkersReport) -> str:
    unclaimed = {t: n for t, n in report.unclaimed.items() if n}
    if not report.workers and not unclaimed:
        return "No workers."
    if not unclaimed:
        return f"{len(report.workers)} worker(s)."
    parts = ", ".join(f"{t}: {n}" for t, n in unclaimed.items())
    return f"{len(report.workers)} worker(s). Taken but not claimed by any worker yet: {parts}."
