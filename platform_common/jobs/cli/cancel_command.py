"""`job cancel TYPE ID`, `session cancel SESSION_ID`: cancel a job, or every job of a user
session (JobQueue.cancel / cancel_session)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..queue import CancelOutcome, CancelReport, JobQueue
from .job_command import AgentTypeArgument, JobIdArgument
from .operator_output import (
    Output,
    OutputOption,
    RedisUrlOption,
    help_text,
    jsonable,
    print_json,
    with_queue,
)

__all__ = ["CANCEL_HELP", "SESSION_CANCEL_HELP", "cancel_job", "cancel_session", "session_app"]

ReasonOption = Annotated[
    str | None,
    typer.Option("--reason", help="Why (at most 1,000 characters): the cancelled result's error."),
]
SessionIdArgument = Annotated[
    str, typer.Argument(metavar="SESSION_ID", help="The session_id of the jobs' payloads.")
]

session_app = typer.Typer(help="Act on the jobs of one user session.", no_args_is_help=True)


def cancel_job(
    agent_type: AgentTypeArgument,
    job_id: JobIdArgument,
    reason: ReasonOption = None,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Cancel a job: one still waiting (queued, scheduled or delayed for a retry) never
    starts; a running one's worker is told within about a second and its attempt ends
    cancelled, whatever its handler returns (its result is never stored). A job that
    had finished, or that is unknown, is left alone and said so. Safe to run twice.
    Needs the operator role in Redis (or the producer role for its own agent types)."""
    reports = with_queue(redis_url, lambda queue: _one(queue, agent_type, job_id, reason))
    _emit(reports, output)


def cancel_session(
    session_id: SessionIdArgument,
    reason: ReasonOption = None,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Cancel every job of a user session that has not finished, of every agent type
    (as `job cancel` does each), and say what happened to each. Needs the operator role."""
    reports = with_queue(redis_url, lambda queue: queue.cancel_session(session_id, reason))
    _emit(reports, output)


session_app.command("cancel", help=help_text(cancel_session.__doc__))(cancel_session)
CANCEL_HELP = help_text(cancel_job.__doc__)
SESSION_CANCEL_HELP = help_text(cancel_session.__doc__)

_SAID = {
    CancelOutcome.CANCELLED: "cancelled (it was waiting: it never starts)",
    CancelOutcome.CANCELLING: "cancelling (it runs: its worker is told; it ends cancelled)",
    CancelOutcome.FINISHED: "already finished",
    CancelOutcome.UNKNOWN: "unknown (never enqueued, or its result has expired)",
}


async def _one(
    queue: JobQueue, agent_type: str, job_id: str, reason: str | None
) -> list[CancelReport]:
    return [await queue.cancel(agent_type, job_id, reason)]


def _emit(reports: list[CancelReport], output: Output) -> None:
    if output == Output.JSON:
        print_json([jsonable(report) for report in reports])
        return
    if not reports:
        print("no job of that session was found")
    for report in reports:
        said = _SAID[report.outcome]
        if report.state:
            said += f" ({report.state})"
        print(f"{report.agent_type} / {report.job_id}: {said}")
