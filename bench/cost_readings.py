"""What bench.cost measures, as plain data: bench.cost fills it in and bench.cost_report
renders it, so the report needs nothing of the module that measures (and runs it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BATCH", "STATES", "CostReport", "CpuCost", "MemoryCost", "Reading", "Rounds"]

STATES = ("queued", "running", "after success", "dead-lettered")
BATCH = 500
"""Ids per LMOVE batch and claim, payloads per raw batched LPUSH, jobs per interleaved
block of enqueue vs LPUSH."""


@dataclass(frozen=True, slots=True)
class MemoryCost:
    """Redis memory per job (bytes) of one payload size, by state (STATES)."""

    target: int
    size: int
    """The encoded payload's bytes."""
    ours: dict[str, float]
    raw: dict[str, float]
    """Raw lists: a queued or taken payload; nothing after success or dead-lettering."""


@dataclass(frozen=True, slots=True)
class CostReport:
    jobs: int
    concurrency: int
    memory: list[MemoryCost]
    cpu: CpuCost
    redis_version: str
    load: tuple[float, float]
    """The host's 1-minute load average at the start and at the end: other processes
    on the cores slow the rates (jobs/s) and, less, the CPU per job."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One side of one round: N jobs through one operation."""

    seconds: float
    redis_cpu: float
    """Redis's CPU seconds (used_cpu_sys + used_cpu_user delta)."""
    process_cpu: float = 0.0
    """The client's CPU seconds: the worker process (drain), the raw BRPOP client (this
    process); 0 where not read."""


@dataclass(frozen=True, slots=True)
class Rounds:
    """The same operation measured in alternated rounds, ours and raw: round i of `ours`
    ran next to round i of `raw` (raw first in even rounds, ours first in odd ones), so
    a reading's pair shared the host's load of the moment."""

    ours: list[Reading]
    raw: list[Reading]


@dataclass(frozen=True, slots=True)
class CpuCost:
    """Seconds (wall, Redis CPU, client CPU) of each operation over N jobs of one
    payload size, in alternated rounds of ours and raw."""

    size: int
    enqueue: Rounds
    """Enqueue one by one vs raw LPUSH one by one, in alternated blocks within a round."""
    many: Rounds
    """enqueue_many (one call of N) vs raw LPUSH of BATCH payloads per command (the
    pipelined reference): the fills of the drain rounds."""
    drain: Rounds
    """One worker process vs raw BRPOP one by one; process_cpu: the worker's, the BRPOP
    client's."""
    drain_commands: dict[str, tuple[int, int]]
    """INFO commandstats delta summed over every round's worker drain."""
    brpop_commands: dict[str, tuple[int, int]]
    """The same over every raw BRPOP drain."""

    @property
    def rounds(self) -> int:
        """Drain rounds: the commandstats sums cover N jobs per round."""
        return len(self.drain.ours)
