"""Pausing an agent type: workers start none of its jobs until it is resumed.

The pause is one key per type (keys.py, `paused`), written by lua/queue_pause.lua and
read by the claim script, so no worker starts a job of the type once `pause` has
returned. What goes on meanwhile: docs/user-guide.md, "Pausing an agent type"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from .connection import QueueConnection

__all__ = ["PauseState", "pause_time", "read_pause", "set_paused"]


@dataclass(frozen=True, slots=True)
class PauseState:
    """Whether an agent type is paused, and since when."""

    agent_type: str
    paused: bool
    since: float | None
    """Redis time (seconds since the epoch) the type was paused at: now, or for a resume
    the pause that ended. None when it was not paused (or the stored time does not
    parse: the pause holds all the same)."""
    changed: bool = False
    """For pause and resume: whether this call changed it (False: it already was)."""


async def set_paused(connection: QueueConnection, agent_type: str, paused: bool) -> PauseState:
    """Pause (or resume) `agent_type`, a configured type or one Redis has seen (else
    ValidationError); safe to call twice, from anywhere. CorruptQueueState, nothing
    written, if the pause key holds another type."""
    keys = await connection.seen_keys(agent_type)
    changed, since = await connection.run_script(
        connection.scripts.pause, [keys.paused], ["pause" if paused else "resume"]
    )
    return PauseState(agent_type, paused, pause_time(since), bool(changed))


async def read_pause(connection: QueueConnection, agent_type: str) -> PauseState:
    """Whether `agent_type` (configured, or seen by Redis) is paused now; a pause key of another
    type is CorruptQueueState (as the claim sees it: the workers take nothing)."""
    keys = await connection.seen_keys(agent_type)
    [since] = await connection.execute_many([("GET", keys.paused)])
    if isinstance(since, ResponseError):  # WRONGTYPE: named as the claim would name it
        raise await connection.refusal(since, [keys.paused]) from since
    if isinstance(since, Exception):
        raise since
    return PauseState(agent_type, since is not None, pause_time(since))


def pause_time(stored: Any) -> float | None:
    """The paused key's value (ms, as text) in seconds; None when absent or not an
    integer (a pause all the same: the claim looks only at whether the key exists)."""
    text = stored.decode() if isinstance(stored, bytes) else stored
    if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text) / 1000
    return None
