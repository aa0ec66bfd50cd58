"""Handlers that ship with the package, for smoke tests and benchmarks."""

from __future__ import annotations

from typing import Any

from .payload import JobPayload

__all__ = ["echo", "noop"]


async def noop(job: JobPayload) -> None:
    """Does nothing; the result is null (measures the queue itself)."""
    return None


async def echo(job: JobPayload) -> dict[str, Any]:
    """Returns the task and constraints it was given."""
    return {"task": job.task, "constraints": job.constraints}
