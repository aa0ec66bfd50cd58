"""JobStore commands: `backfill` (fill the time index), with a rich progress bar."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..store.backfill import BackfillProgress, run, summary, unindexed
from .exits import EXIT_FAILURE, CliError
from .operator_output import Output, OutputOption, print_json

__all__ = ["backfill"]

_LOG_EVERY = 2.0
"""Seconds between progress lines when stderr is not a terminal (logs, CI)."""


def _counts(scanned: int, total: int | None) -> str:
    # The total is the store's cheap estimate (it counts expired keys too), hence "~".
    return f"{scanned:,} / ~{total:,} records" if total else f"{scanned:,} records scanned"


@contextmanager
def _bar(console: Console) -> Iterator[BackfillProgress]:
    columns = (TextColumn("backfill"), BarColumn(), TextColumn("{task.description}"))
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("", total=None)

        def show(scanned: int, total: int | None) -> None:
            progress.update(
                task, completed=scanned, total=total, description=_counts(scanned, total)
            )

        yield show


@contextmanager
def _lines(console: Console) -> Iterator[BackfillProgress]:
    # A redrawn bar would be noise in a log: one plain line now and then, and the last.
    last_line = -_LOG_EVERY
    latest = ""

    def show(scanned: int, total: int | None) -> None:
        nonlocal last_line, latest
        latest = f"backfill: {_counts(scanned, total)}"
        if time.monotonic() - last_line >= _LOG_EVERY:
            console.print(latest, markup=False, highlight=False, soft_wrap=True)
            last_line = time.monotonic()
            latest = ""

    yield show
    if latest:
        console.print(latest, markup=False, highlight=False, soft_wrap=True)


def backfill(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count only, write nothing.")] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Write nothing; exit 1 while a record lacks its index entry "
            "(run before turning index reads on).",
        ),
    ] = False,
    batch: Annotated[int, typer.Option("--batch", help="Records per round trip.")] = 500,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="No progress on stderr, the summary only.")
    ] = False,
    output: OutputOption = Output.TABLE,
) -> None:
    """Fill the time index from the stored records (idempotent; safe under traffic).

    Reads JOB_STORE_URL and OTEL_SERVICE_NAME like the agent. Rollout:
    JOBSTATE_TIME_INDEX_WRITES=true on every agent, run the backfill, run it with
    --verify until it exits 0, then JOBSTATE_TIME_INDEX_READS=true.
    """
    # The target goes to stderr before anything else: a run against the wrong store (or
    # namespace) is visible at once, not after it reports zeros.
    console = Console(stderr=True)

    def announce(target: str) -> None:
        console.print(target, markup=False, highlight=False, soft_wrap=True)

    dry = dry_run or verify
    if quiet:
        report = asyncio.run(run(dry_run=dry, batch=batch, announce=announce))
    else:
        with _bar(console) if console.is_terminal else _lines(console) as progress:
            report = asyncio.run(
                run(dry_run=dry, batch=batch, progress=progress, announce=announce)
            )
    if output == Output.JSON:
        print_json(report)  # the report's fields, malformed ids and bad buckets included
    else:
        # Plain stdout, not rich: the summary is read by scripts as much as by people.
        print(summary(report, verify=verify))
    problem = unindexed(report) if verify else None
    if problem is not None:
        raise CliError(f"verify: {problem}", EXIT_FAILURE)
