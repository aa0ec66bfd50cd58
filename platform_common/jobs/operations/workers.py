"""`workers`: each worker's heartbeat and the jobs it holds, per agent type."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..metric_catalogue import HEARTBEAT_CLOCK_TOLERANCE_MS
from ..queue import JobQueue
from .overview import heartbeat_window
from .session import PAGE, read, redis_now, score_pairs

__all__ = ["WorkerStatus", "WorkersReport", "host_of", "pid_of", "read_workers"]

_DEFAULT_WORKER_ID = re.compile(r"^(?P<host>.+):(?P<pid>\d+):[0-9a-f]+$")
"""The id a worker gives itself without --worker-id: host:pid:random hex."""


def host_of(worker_id: str) -> str:
    """The host in a default worker id ("" for an id chosen with --worker-id)."""
    match = _DEFAULT_WORKER_ID.match(worker_id)
    return match["host"] if match else ""


def pid_of(worker_id: str) -> int | None:
    """The process id in a default worker id (None for an id chosen with --worker-id)."""
    match = _DEFAULT_WORKER_ID.match(worker_id)
    return int(match["pid"]) if match else None


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker of one agent type."""

    worker_id: str
    agent_type: str
    host: str
    """From the default id (host:pid:random); "" when the id was chosen."""
    pid: int | None
    """From the default id; None when the id was chosen."""
    heartbeat_age_seconds: float | None
    """Since its last heartbeat; None when it holds jobs but has no heartbeat (gone
    silent for long enough to be forgotten: its leases expire and the reaper frees them)."""
    active: bool
    """Its heartbeat is within the active window (see overview.heartbeat_window) and
    not dated in the future (metric_catalogue.HEARTBEAT_CLOCK_TOLERANCE_MS)."""
    jobs_in_progress: tuple[str, ...]
    """Ids of the jobs it has claimed and not yet finished."""
    concurrency: int | None = None
    """The most jobs it runs at once, as its heartbeat reported; None when not reported
    (a worker of an earlier release, or in another language) or not a number."""


@dataclass(frozen=True, slots=True)
class WorkersReport:
    """The workers of the requested agent types, read at `read_at` (Redis time, s)."""

    read_at: float
    workers: tuple[WorkerStatus, ...]
    """Per agent type, most recent heartbeat first."""
    unclaimed: dict[str, int]
    """Per agent type, jobs in the processing list that no worker has claimed (taken a
    moment ago, or by a worker that died before claiming them: the reaper returns them)."""


async def read_workers(queue: JobQueue, agent_types: Sequence[str]) -> WorkersReport:
    """Heartbeats (ZSCAN pages of the workers set, which the queue prunes to the fleet),
    each worker's concurrency (HGETALL of the hash pruned with them) and the `worker`
    field of each job in the processing list (LRANGE + HMGET pages)."""
    now = await redis_now(queue)
    window = heartbeat_window(queue.settings)
    workers: list[WorkerStatus] = []
    unclaimed: dict[str, int] = {}
    for agent_type in agent_types:
        beats = await _heartbeats(queue, agent_type)
        holders = await _holders(queue, agent_type)
        slots = await _concurrency(queue, agent_type)
        unclaimed[agent_type] = len(holders.pop("", []))
        ids = sorted(beats, key=lambda w: -beats[w]) + sorted(set(holders) - set(beats))
        for worker_id in ids:
            beat = beats.get(worker_id)
            age = None if beat is None else max(0.0, now - beat / 1000)
            workers.append(
                WorkerStatus(
                    worker_id=worker_id,
                    agent_type=agent_type,
                    host=host_of(worker_id),
                    pid=pid_of(worker_id),
                    heartbeat_age_seconds=age,
                    active=beat is not None
                    and age is not None
                    and age < window
                    and beat <= now * 1000 + HEARTBEAT_CLOCK_TOLERANCE_MS,
                    jobs_in_progress=tuple(holders.get(worker_id, [])),
                    concurrency=slots.get(worker_id),
                )
            )
    return WorkersReport(now, tuple(workers), unclaimed)


async def _heartbeats(queue: JobQueue, agent_type: str) -> dict[str, float]:
    """Worker id -> last heartbeat (ms). ZSCAN rather than ranks: scores move as workers
    beat, and ZSCAN still returns every member present throughout."""
    key = queue.connection.keys(agent_type).workers
    beats: dict[str, float] = {}
    cursor: int | str = 0
    while True:
        cursor, page = (await read(queue, [("ZSCAN", key, cursor, "COUNT", PAGE)]))[0]
        beats.update(score_pairs(page))
        if int(cursor) == 0:
            return beats


async def _concurrency(queue: JobQueue, agent_type: str) -> dict[str, int]:
    """Worker id -> its concurrency, from the hash its heartbeats write (one field a
    live worker: pruned with the heartbeats); a value that is not a number is left out."""
    key = queue.connection.keys(agent_type).worker_concurrency
    (fields,) = await read(queue, [("HGETALL", key)])
    slots = {}
    for worker_id, value in dict(fields).items():
        try:
            slots[str(worker_id)] = int(value)
        except ValueError:
            continue
    return slots


async def _holders(queue: JobQueue, agent_type: str) -> dict[str, list[str]]:
    """Worker id ("" when none) -> the ids of the processing list's jobs it holds."""
    keys = queue.connection.keys(agent_type)
    holders: dict[str, list[str]] = {}
    start = 0
    while True:
        (job_ids,) = await read(queue, [("LRANGE", keys.processing, start, start + PAGE - 1)])
        if not job_ids:
            return holders
        # A taken job is claimed (state running, its worker set) in the claim script.
        fields = await read(queue, [("HMGET", keys.job(j), "state", "worker") for j in job_ids])
        for job_id, (state, worker) in zip(job_ids, fields, strict=True):
            holder = worker if state == "running" and worker else ""
            holders.setdefault(holder, []).append(job_id)
        start += PAGE
