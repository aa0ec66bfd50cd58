"""`dead list | show | requeue | purge`: the dead letters of one agent type; `failed ...`:
the same commands on its jobs failed for good. One sub-app, built for each kept list."""

# No `from __future__ import annotations`: typer reads the annotations of the commands,
# defined inside kept_app, at runtime.

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..operations import (
    MAX_SCAN,
    DeadLetterAction,
    DeadLetterLine,
    DeadLetterListing,
    KeptList,
    list_dead_letters,
    purge_dead_letters,
    requeue_dead_letters,
    select_dead_letters,
    show_dead_letter,
)
from ..operations import Progress as ProgressCallback
from ..operations.stored import readable
from ..queue import JobQueue
from .exits import EXIT_USAGE, CliError
from .job_command import AgentTypeArgument, JobIdArgument, emit, found
from .operator_output import (
    NONE,
    Output,
    OutputOption,
    RedisUrlOption,
    command,
    jsonable,
    print_json,
    stdout,
    text,
    timestamp,
    with_queue,
)

__all__ = ["app", "failed_app", "kept_app"]

_SUMMARY = {
    KeptList.DEAD: "The dead letters of an agent type: jobs that used their last attempt.",
    KeptList.FAILED: (
        "The failed jobs of an agent type: jobs failed for good without a retry (the "
        "handler raised NonRetryableError, or its result could not be stored)."
    ),
}

ErrorMatchesOption = Annotated[
    str | None,
    typer.Option(
        "--error-matches",
        metavar="RE",
        help="Those whose last error matches this regular expression (searched anywhere in it).",
        show_default=False,
    ),
]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Count and name what would be done; change nothing.")
]


def kept_app(kept: KeptList) -> typer.Typer:
    """The `list | show | requeue | purge` sub-app of one kept list: the same commands,
    options, confirmation rules and exit statuses for both lists, worded for this one."""
    app = typer.Typer(help=_SUMMARY[kept], no_args_is_help=True)

    # The commands' docstrings, worded for the list: {name} the command group,
    # {noun}/{nouns} its entries, {ended} how one joined it.
    words = {"name": kept.value, "noun": kept.noun, "nouns": kept.nouns, "ended": kept.ended}
    ids_option = Annotated[
        list[str] | None,
        typer.Option(
            "--id", metavar="ID", help=f"The job id of a {kept.noun} (repeat for more).",
            show_default=False,
        ),
    ]  # fmt: skip
    all_option = Annotated[bool, typer.Option("--all", help=f"Every {kept.noun} of the type.")]

    @command(app, "list", **words)
    def list_(
        agent_type: AgentTypeArgument,
        limit: Annotated[
            int, typer.Option("--limit", "-n", min=1, help="Show at most this many.")
        ] = 20,
        error_matches: ErrorMatchesOption = None,
        start: Annotated[
            int,
            typer.Option(
                "--start",
                min=0,
                help="Begin at this list position (0 = the newest; the caption "
                "of a partial listing names the next one).",
            ),
        ] = 0,
        max_scan: Annotated[
            int,
            typer.Option(
                "--max-scan",
                min=1,
                help=f"With --error-matches: look at most at this many {kept.nouns}, "
                "then stop and say where to continue.",
            ),
        ] = MAX_SCAN,
        output: OutputOption = Output.TABLE,
        redis_url: RedisUrlOption = None,
    ) -> None:
        """The {nouns} of the type, newest first: id, when, attempts, last error
        (`{name} show` for the rest). With --error-matches, the list is read 500 at a time
        until --limit match or --max-scan entries were looked at; the caption (JSON:
        "next_start") says where a further search would start. `{name} requeue` and
        `{name} purge` with --error-matches always cover the whole list."""

        listing = with_queue(
            redis_url,
            lambda queue: list_dead_letters(
                queue, agent_type, limit=limit, error_matches=error_matches, start=start,
                max_scan=max_scan, kept=kept,
            ),
        )  # fmt: skip
        if output == Output.JSON:
            print_json({**jsonable(listing), "next_start": listing.next_start})
            return
        table = Table(caption=_caption(listing, error_matches), caption_justify="left")
        table.add_column("JOB ID", no_wrap=True)
        table.add_column("DEAD AT" if kept is KeptList.DEAD else "FAILED AT", no_wrap=True)
        table.add_column("ATTEMPTS", justify="right", no_wrap=True)
        table.add_column("LAST ERROR", no_wrap=True, overflow="ellipsis")
        for letter in listing.letters:
            table.add_row(
                text(letter.job_id),
                _as_stored(letter, "finished_at", timestamp(letter.dead_at)),
                _as_stored(letter, "attempts", str(letter.attempts)),
                text(" ".join(letter.last_error.split()) or NONE),
            )
        stdout().print(table)

    @command(app, "show", **words)
    def show(
        agent_type: AgentTypeArgument,
        job_id: JobIdArgument,
        output: OutputOption = Output.TABLE,
        redis_url: RedisUrlOption = None,
    ) -> None:
        """A {noun}'s attempts (errors with tracebacks), payload and result, as
        `job show`; exit 1 if the job is not a {noun}."""

        emit(
            found(redis_url, lambda queue: show_dead_letter(queue, agent_type, job_id, kept)),
            output,
        )

    @command(app, "requeue", **words)
    def requeue(
        agent_type: AgentTypeArgument,
        job_ids: ids_option = None,
        every: all_option = False,
        error_matches: ErrorMatchesOption = None,
        dry_run: DryRunOption = False,
        output: OutputOption = Output.TABLE,
        redis_url: RedisUrlOption = None,
    ) -> None:
        """Put {nouns} back on the queue with fresh attempts and a fresh TTL, oldest
        first, 500 per call. Select with --id (repeatable), --all or --error-matches. Only
        the {nouns} selected are requeued: one {ended} after the selection is left alone.
        The counts printed are what Redis reports was done."""
        selection = _Selection(kept, agent_type, job_ids, every, error_matches)
        report = _act("requeue", selection, dry_run, True, redis_url)
        _print_report(report, output)

    @command(app, "purge", **words)
    def purge(
        agent_type: AgentTypeArgument,
        job_ids: ids_option = None,
        every: all_option = False,
        error_matches: ErrorMatchesOption = None,
        dry_run: DryRunOption = False,
        yes: Annotated[
            bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")
        ] = False,
        output: OutputOption = Output.TABLE,
        redis_url: RedisUrlOption = None,
    ) -> None:
        """Delete {nouns} for good (record and result), 500 per call. Select with --id
        (repeatable), --all or --error-matches. Asks for confirmation first; without a
        terminal to ask on, refuses unless --yes. Only the {nouns} counted are purged: one
        {ended} after the count (while the question waits, say) is left alone."""
        if not dry_run and not yes and not sys.stdin.isatty():
            raise CliError(
                "purge: no terminal to confirm on; pass --yes (or --dry-run)", EXIT_USAGE
            )
        selection = _Selection(kept, agent_type, job_ids, every, error_matches)
        report = _act("purge", selection, dry_run, yes, redis_url)
        _print_report(report, output)

    return app


app = kept_app(KeptList.DEAD)
failed_app = kept_app(KeptList.FAILED)


@dataclass(frozen=True, slots=True)
class _Selection:
    """What a requeue or purge was asked to select, as its options gave it."""

    kept: KeptList
    agent_type: str
    job_ids: list[str] | None
    every: bool
    error_matches: str | None


def _as_stored(letter: DeadLetterLine, field: str, parsed: str) -> Text:
    """A cell: the parsed value, or the stored text of a field that does not parse."""
    stored = letter.unparsed.get(field)
    return text(parsed) if stored is None else text(f"{stored} (does not parse)")


def _caption(listing: DeadLetterListing, error_matches: str | None) -> str:
    shown = len(listing.letters)
    nouns = listing.kept.nouns
    if error_matches is None:
        caption = f"{shown:,} of {listing.total:,} {nouns}, newest first."
    else:
        if listing.complete:
            scope = (
                "all"
                if listing.start == 0
                else f"the {listing.scanned:,} from position {listing.start:,} on"
            )
        elif listing.start == 0:
            scope = f"the newest {listing.scanned:,}"
        else:
            scope = f"{listing.scanned:,} from position {listing.start:,}"
        caption = (
            f"{shown:,} matching {error_matches!r} among {scope} of {listing.total:,} "
            f"{nouns}, newest first."
        )
    if listing.scan_limited:
        caption += f" Stopped after looking at {listing.scanned:,} (--max-scan)."
    if listing.next_start is not None and listing.next_start < listing.total:
        caption += f" More: --start {listing.next_start}."
    return caption


def _act(
    action: str, asked: _Selection, dry_run: bool, confirmed: bool, redis_url: str | None
) -> DeadLetterAction:
    async def act(queue: JobQueue) -> DeadLetterAction:
        with _progress("scanning") as scanned:
            selection = await select_dead_letters(
                queue, asked.agent_type, job_ids=asked.job_ids or (), every=asked.every,
                error_matches=asked.error_matches, on_scan=scanned, kept=asked.kept,
            )  # fmt: skip
        if not dry_run and not confirmed and selection.count:
            typer.confirm(
                f"{action.capitalize()} {selection.count:,} {asked.kept.noun}(s) of "
                f"{asked.agent_type!r} for good (record and result)?",
                abort=True,
                err=True,
            )
        run = requeue_dead_letters if action == "requeue" else purge_dead_letters
        with _progress(action) as progress:
            return await run(queue, selection, dry_run=dry_run, progress=progress)

    return with_queue(redis_url, act)


@contextmanager
def _progress(label: str) -> Iterator[ProgressCallback]:
    """A bar on stderr while a terminal watches (thousands of entries take a while);
    nothing otherwise (scripts read the summary)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda done, total: None
        return
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _print_report(report: DeadLetterAction, output: Output) -> None:
    if output == Output.JSON:
        print_json(report)
        return
    kept = report.kept
    selected = {
        "ids": "--id",
        "all": "--all",
        "error-matches": f"--error-matches {report.pattern!r}",
    }
    how = selected[report.kind]
    if report.dry_run:
        line = (
            f"dry run (nothing changed): would {report.action} {report.selected:,} "
            f"{kept.noun}(s) of {report.agent_type!r} ({how})"
        )
        if report.sample:
            more = ", ..." if report.selected > len(report.sample) else ""
            line += f": {', '.join(report.sample)}{more}"
    else:
        past = "requeued" if report.action == "requeue" else "purged"
        line = (
            f"{past} {report.done:,} of {report.selected:,} selected {kept.noun}(s) of "
            f"{report.agent_type!r} ({how})"
        )
        if report.gone:
            line += f"; {report.gone:,} were no longer {kept.nouns}"
        if report.newer:
            moment = "the selection" if report.as_of is None else timestamp(report.as_of / 1000)
            line += f"; {report.newer:,} {kept.ended} after {moment} were left alone"
    # Plain print: the summary is read by scripts as much as by people.
    print(readable(line))
    if report.not_dead:
        print(readable(f"not {kept.nouns}, left alone: {', '.join(report.not_dead)}"))
