"""The dead-letter list of each agent type: list, requeue and purge."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..keys import QueueKeys
from .connection import QueueConnection

__all__ = ["DeadLetter", "DeadLetters"]

BATCH = 500
"""Jobs per script call when requeueing or purging many (bounded work per call)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job that used its last attempt (QueueState.DEAD), with what went wrong each time."""

    job_id: str
    """The job's id (unique within its agent type)."""
    agent_type: str
    """The agent type whose dead-letter list holds it."""
    payload: dict[str, Any]
    """The payload as the producer enqueued it."""
    attempts: int
    """Attempts used, crashed ones included."""
    last_error: str
    """The error of the last attempt ("" if none was recorded)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """One entry per failed attempt: attempt, worker, started_at, ended_at (ms),
    error, traceback (bounded; absent when none was recorded), outcome, retry_at (ms)
    when another attempt was scheduled. `outcome` is the queue_fail mode, not an
    AttemptOutcome: "error" = the handler raised, "lost" = the worker died, "corrupt" =
    the stored job did not parse ("fatal" never reaches a dead letter: it fails the job
    instead)."""
    dead_at: float = 0.0
    """Seconds since the epoch when it was dead-lettered."""


class DeadLetters:
    """Dead letters of every agent type, through one connection."""

    def __init__(self, connection: QueueConnection) -> None:
        self._connection = connection

    async def count(self, agent_type: str) -> int:
        return int(await self._connection.client.llen(self._keys(agent_type).dead))  # type: ignore[misc]

    async def list(self, agent_type: str, *, start: int = 0, count: int = 100) -> list[DeadLetter]:
        """Dead letters newest first, `count` of them from position `start`."""
        keys = self._keys(agent_type)
        client = self._connection.client
        job_ids: list[str] = await client.lrange(keys.dead, start, start + count - 1)  # type: ignore[misc]
        if not job_ids:
            return []
        pipe = client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(
                keys.job(job_id), ["payload", "attempts", "last_error", "history", "finished_at"]
            )
        letters = []
        for job_id, (payload, attempts, error, history, dead_at) in zip(
            job_ids, await pipe.execute(), strict=True
        ):
            if payload is None:
                continue  # purged between the two reads
            letters.append(
                DeadLetter(
                    job_id=job_id,
                    agent_type=agent_type,
                    payload=json.loads(payload),
                    attempts=int(attempts or 0),
                    last_error=error or "",
                    history=json.loads(history) if history else [],
                    dead_at=int(dead_at or 0) / 1000,
                )
            )
        return letters

    async def requeue(
        self, agent_type: str, job_ids: Sequence[str] | None = None, *, limit: int = BATCH
    ) -> builtins.list[str]:
        """Put dead letters back on the queue with fresh attempts and a fresh TTL window
        (counted as enqueued). Without `job_ids`, the oldest `limit` of them."""
        keys = self._keys(agent_type)
        if job_ids is None:
            job_ids = await self._connection.client.lrange(keys.dead, -limit, -1)  # type: ignore[misc]
        requeued: builtins.list[str] = []
        for start in range(0, len(job_ids), BATCH):
            chunk = list(job_ids[start : start + BATCH])
            script_keys = [keys.dead, keys.queue, keys.expiry, keys.stats, keys.waiting]
            for job_id in chunk:
                script_keys += [keys.job(job_id), keys.result(job_id)]
            requeued += await self._connection.run_script(
                self._connection.scripts.dead_requeue, script_keys, chunk
            )
        return requeued

    async def purge(self, agent_type: str, job_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters for good (record and result too); all of them without
        `job_ids`, BATCH per script call. Returns how many were purged: ids that were not
        dead letters (never were, requeued, purged before) are not counted."""
        keys = self._keys(agent_type)
        client = self._connection.client
        purged = 0
        offset = 0
        while True:
            if job_ids is None:
                chunk: builtins.list[str] = await client.lrange(keys.dead, -BATCH, -1)  # type: ignore[misc]
            else:
                chunk = list(job_ids[offset : offset + BATCH])
                offset += len(chunk)
            if not chunk:
                return purged
            script_keys = [keys.dead]
            for job_id in chunk:
                script_keys += [keys.job(job_id), keys.result(job_id)]
            done = int(
                await self._connection.run_script(
                    self._connection.scripts.dead_purge, script_keys, chunk
                )
            )
            purged += done
            if job_ids is None and done == 0:
                return purged

    def _keys(self, agent_type: str) -> QueueKeys:
        return self._connection.known_keys(agent_type)
