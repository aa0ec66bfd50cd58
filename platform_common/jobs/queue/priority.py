"""Priorities: `enqueue(job, priority="high" | "normal" | "low")`.

Each level waits on a list of its own (keys.py: `queue` is normal, `queue:high` and
`queue:low` the others), so a type that uses only "normal", the default, costs nothing
more. A claim takes from the highest level that has jobs waiting, except on its fair
turns (FAIR_TURN; lua/queue_claim.lua; docs/user-guide.md, "Priorities", gives the
shares). A job keeps its level through retries, releases and the reaper (its packed
header, then its job hash `priority`)."""

from __future__ import annotations

from ..errors import InvalidPayload
from ..keys import PRIORITY_LEVELS

__all__ = ["DEFAULT_PRIORITY", "FAIR_TURN", "PRIORITY_LEVELS", "Priority", "priority_of"]

Priority = str
"""One of PRIORITY_LEVELS."""

DEFAULT_PRIORITY = "normal"

FAIR_TURN = 10
"""The claim numbers every job it starts (the type's `started` count): job k with
k % FAIR_TURN == 0 comes from the lowest level with jobs waiting, with k % FAIR_TURN ==
FAIR_TURN // 2 from the level just below the highest one with jobs waiting; the
starvation bound. The claim script holds the same number."""

_CODES = {"high": "h", "low": "l"}
"""A level's code in the packed header and the scripts' arguments (normal has none)."""


def priority_of(priority: object) -> Priority:
    """`priority` checked: one of PRIORITY_LEVELS (None is the default, "normal");
    InvalidPayload naming `priority` and the levels for anything else."""
    if priority is None:
        return DEFAULT_PRIORITY
    if isinstance(priority, str) and priority in PRIORITY_LEVELS:
        return priority
    shown = repr(priority) if isinstance(priority, str) else type(priority).__name__
    levels = ", ".join(repr(level) for level in PRIORITY_LEVELS)
    raise InvalidPayload({"priority": f"must be one of {levels}, got {shown:.80}"})


def priority_code(priority: Priority) -> str:
    """The level's one-letter code as the scripts take it ("" for normal)."""
    return _CODES.get(priority, "")


def priority_from_code(code: str | None) -> Priority:
    """The level a stored code names ("h", "l"; anything else, or none, is normal)."""
    if code == "h":
        return "high"
    if code == "l":
        return "low"
    return DEFAULT_PRIORITY
