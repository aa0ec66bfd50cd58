"""`job show`: one job's state, attempts (errors with tracebacks), payload and result."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..errors import JobNotFound
from ..operations import JobDetail, Unparsed, show_job
from ..queue import JobQueue
from .exits import CliError
from .operator_output import (
    NONE,
    Output,
    OutputOption,
    RedisUrlOption,
    command,
    print_json,
    stdout,
    text,
    timestamp,
    with_queue,
)

__all__ = ["AgentTypeArgument", "JobIdArgument", "app", "emit", "found", "render_job"]

app = typer.Typer(help="Look at one job.", no_args_is_help=True)

AgentTypeArgument = Annotated[str, typer.Argument(metavar="TYPE", help="The job's agent type.")]
JobIdArgument = Annotated[str, typer.Argument(metavar="ID", help="The job id.")]


@command(app, "show")
def show(
    agent_type: AgentTypeArgument,
    job_id: JobIdArgument,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """A job's state, attempts, each failed attempt's error and traceback, its payload and
    its result. Exit 1 if there is no such job (never enqueued, or gone with its TTL)."""
    emit(found(redis_url, lambda queue: show_job(queue, agent_type, job_id)), output)


def found(redis_url: str | None, read: Callable[[JobQueue], Awaitable[JobDetail]]) -> JobDetail:
    """with_queue(redis_url, read); a job that is not there is a failure of the command
    (exit 1), in one line, rather than an unexpected error."""
    try:
        return with_queue(redis_url, read)
    except JobNotFound as exc:
        raise CliError(str(exc)) from exc


def emit(detail: JobDetail, output: Output) -> None:
    """Print `detail` as JSON or as rich panels (also `dead show`)."""
    if output == Output.JSON:
        print_json(detail)
    else:
        render_job(stdout(), detail)


def render_job(console: Console, detail: JobDetail) -> None:
    # On a terminal the panels fill its width; written to a pipe or a file (200 columns,
    # see operator_output.stdout) each is as wide as what it holds.
    fill = console.is_terminal
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    attempts = f"{detail.attempts}" + (f" of {detail.max_attempts}" if detail.max_attempts else "")
    rows: list[tuple[str, RenderableType]] = [
        ("job", text(f"{detail.agent_type} / {detail.job_id}")),
        ("state", text(detail.state)),
        ("priority", text(detail.priority)),
        ("attempts", attempts),
        ("worker", text(detail.worker or NONE)),
        ("enqueued", timestamp(detail.enqueued_at)),
        ("started", timestamp(detail.started_at)),
        ("finished", timestamp(detail.finished_at)),
        _lifetime(detail),
    ]
    rows += [("scheduled for", timestamp(detail.run_at))] if detail.run_at else []
    rows += [("retry due", timestamp(detail.retry_due_at))] if detail.retry_due_at else []
    rows += [("requeued", timestamp(detail.requeued_at))] if detail.requeued_at else []
    rows += [("last error", text(detail.last_error))] if detail.last_error else []
    if detail.cancel_requested is not None:
        rows.append(("cancel asked", text(detail.cancel_requested or "(no reason given)")))
    if detail.state == "cancelled":
        rows.append(("cancelled", text(detail.cancel_reason or NONE)))
    if detail.unparsed:
        names = ", ".join(dict.fromkeys(u.field for u in detail.unparsed))
        rows.append(("does not parse", Text(f"{names}: shown as stored below", style="bold red")))
    for name, value in rows:
        facts.add_row(name, value)
    parts: list[RenderableType] = [facts]
    # A field that does not parse is drawn where it would be, as its stored text.
    unparsed = {u.field: u for u in detail.unparsed}
    if "history" in unparsed:
        parts.append(_unparsed(unparsed["history"], fill))
    for attempt in detail.history:
        body: list[RenderableType] = [
            text(f"{attempt.outcome}: {attempt.error}"),
            Text(f"worker {attempt.worker or NONE}, {timestamp(attempt.started_at)} → "
                 f"{timestamp(attempt.ended_at)}", style="dim"),
        ]  # fmt: skip
        if attempt.retry_at:
            body.append(Text(f"retry scheduled for {timestamp(attempt.retry_at)}", style="dim"))
        if attempt.traceback:
            body.append(text(attempt.traceback.rstrip()))
        title = f"attempt {attempt.attempt}"
        parts.append(Panel(Group(*body), title=title, title_align="left", expand=fill))
    if "progress" in unparsed:
        parts.append(_unparsed(unparsed["progress"], fill))
    elif detail.progress is not None:
        title = f"progress (reported {timestamp(detail.progress_at)})"
        parts.append(Panel(_json(detail.progress), title=title, title_align="left", expand=fill))
    if "payload" in unparsed:
        parts.append(_unparsed(unparsed["payload"], fill))
    else:
        parts.append(Panel(_json(detail.payload), title="payload", title_align="left", expand=fill))
    result = detail.result
    if "result" in unparsed:
        parts.append(_unparsed(unparsed["result"], fill))
    elif result is not None:
        shown = {"status": result.status, "result": result.result, "error": result.error}
        parts.append(Panel(_json(shown), title="result", title_align="left", expand=fill))
    parts += [_unparsed(u, fill) for u in detail.unparsed if u.field not in _PLACED]
    console.print(Group(*parts))


_PLACED = ("history", "progress", "payload", "result")


def _lifetime(detail: JobDetail) -> tuple[str, RenderableType]:
    """An active job expires at its TTL deadline; one that ended is kept (by its TTL or
    the dead-letter retention) until Redis drops it: the row says which is true."""
    if detail.active:
        return "expires", timestamp(detail.expires_at)
    if detail.kept_until is None:
        return "kept until", "requeued or purged" if detail.state == "dead" else NONE
    return "kept until", f"{timestamp(detail.kept_until)} ({detail.kept_by})"


def _unparsed(field: Unparsed, fill: bool) -> Panel:
    """A stored field that does not parse, as the text it holds (the worker dead-letters
    such a job as corrupt: this is what on-call came to see)."""
    note = f"does not parse: {field.problem}. The {field.size:,} stored bytes as text" + (
        ", \\xNN a byte that is not UTF-8:" if field.problem.startswith("not UTF-8") else ":"
    )
    body = Group(Text(note, style="bold red"), text(field.raw))
    title = f"{field.field} (stored, does not parse)"
    return Panel(body, title=title, title_align="left", expand=fill)


def _json(value: Any) -> RenderableType:
    if value is None:
        return Text(NONE)
    return text(json.dumps(value, indent=2, ensure_ascii=False))
