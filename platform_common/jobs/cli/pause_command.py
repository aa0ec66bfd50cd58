"""`pause TYPE`, `resume TYPE`: stop workers starting jobs of an agent type, and let them
start again (JobQueue.pause / resume)."""

from __future__ import annotations

from ..operations.formatting import timestamp
from ..queue import PauseState
from .job_command import AgentTypeArgument
from .operator_output import (
    Output,
    OutputOption,
    RedisUrlOption,
    help_text,
    print_json,
    with_queue,
)

__all__ = ["PAUSE_HELP", "RESUME_HELP", "pause", "resume"]


def pause(
    agent_type: AgentTypeArgument,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Pause an agent type: once this returns, workers start none of its jobs (a job a
    worker had already taken goes back to the queue); running jobs finish, producers can
    still enqueue, and waiting jobs keep their TTL (they expire if it passes). Pausing a
    paused type changes nothing and says since when it is paused. Needs the operator
    role in Redis."""
    _emit(with_queue(redis_url, lambda queue: queue.pause(agent_type)), output)


def resume(
    agent_type: AgentTypeArgument,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Resume a paused agent type: its workers take jobs again within about a second.
    Resuming a type that is not paused changes nothing. Needs the operator role."""
    _emit(with_queue(redis_url, lambda queue: queue.resume(agent_type)), output)


PAUSE_HELP = help_text(pause.__doc__)
RESUME_HELP = help_text(resume.__doc__)


def _emit(state: PauseState, output: Output) -> None:
    if output == Output.JSON:
        print_json(state)
        return
    since = timestamp(state.since, "seconds")
    if state.paused:
        print(
            f"{state.agent_type}: paused at {since}; workers start none of its jobs until "
            "it is resumed (running jobs finish)"
            if state.changed
            else f"{state.agent_type}: already paused, since {since}"
        )
    else:
        print(
            f"{state.agent_type}: resumed (paused since {since}); workers take its jobs again"
            if state.changed
            else f"{state.agent_type}: not paused; nothing to resume"
        )
