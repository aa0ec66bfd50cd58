"""The jobs kept for an operator, one list each per agent type: the dead letters (used
their last attempt) and the failed jobs (a non-retryable error): list, requeue, purge."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..keys import QueueKeys
from ..status import QueueState
from .connection import QueueConnection

__all__ = ["DeadLetter", "DeadLetters"]

BATCH = 500
"""Jobs per script call when requeueing or purging many (bounded work per call)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job kept for an operator, with what went wrong each time: a dead letter (used
    its last attempt, QueueState.DEAD) or a failed job (QueueState.FAILED)."""

    job_id: str
    """The job's id (unique within its agent type)."""
    agent_type: str
    """The agent type whose dead-letter list holds it."""
    payload: dict[str, Any]
    """The payload as the producer enqueued it ({} if the stored text does not parse:
    the history's last error says why)."""
    attempts: int
    """Attempts used, crashed ones included."""
    last_error: str
    """The error of the last attempt ("" if none was recorded)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """One entry per failed attempt: attempt, worker, started_at, ended_at (ms),
    error, traceback (bounded; absent when none was recorded), outcome, retry_at (ms)
    when another attempt was scheduled. `outcome` is the queue_fail mode, not an
    AttemptOutcome: "error" = the handler raised, "lost" = the worker died, "corrupt" =
    the stored job did not parse, "fatal" = the handler raised NonRetryableError (the
    last entry of every failed job, never of a dead letter)."""
    dead_at: float = 0.0
    """Seconds since the epoch when it ended (dead-lettered or failed)."""
    state: QueueState = QueueState.DEAD
    """DEAD (kept on the dead-letter list) or FAILED (kept on the failed list)."""


class DeadLetters:
    """One kept list of every agent type, through one connection: the dead letters, or
    with `failed=True` the failed jobs (JobQueue.dead_letters and JobQueue.failed_jobs).

    Each kept job lasts `dead_letter_retention` and each list holds at most
    `dead_letter_max` (see retention.py). An agent type that is not configured is a
    ValidationError naming it, as at enqueue, never an empty answer."""

    def __init__(self, connection: QueueConnection, *, failed: bool = False) -> None:
        self._connection = connection
        self._list_of = attrgetter("failed" if failed else "dead")
        self._state = QueueState.FAILED if failed else QueueState.DEAD

    async def count(self, agent_type: str) -> int:
        """Entries of the list (one whose retention just passed counts until pruned)."""
        return int(await self._connection.client.llen(self._list(agent_type)))  # type: ignore[misc]

    async def list(self, agent_type: str, *, start: int = 0, count: int = 100) -> list[DeadLetter]:
        """Kept jobs newest first, `count` of them from position `start` (entries whose
        record is gone, purged or past its retention, are left out)."""
        keys = self._keys(agent_type)
        client = self._connection.client
        job_ids: list[str] = await client.lrange(self._list_of(keys), start, start + count - 1)  # type: ignore[misc]
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
                continue  # purged, or past its retention
            letters.append(
                DeadLetter(
                    job_id=job_id,
                    agent_type=agent_type,
                    payload=_json_object(payload),
                    attempts=_int(attempts),
                    last_error=error or "",
                    history=_history(history),
                    dead_at=_int(dead_at) / 1000,
                    state=self._state,
                )
            )
        return letters

    async def requeue(
        self, agent_type: str, job_ids: Sequence[str] | None = None, *, limit: int = BATCH
    ) -> builtins.list[str]:
        """Put kept jobs back on the queue with fresh attempts and a fresh TTL window
        (counted as enqueued; the retention TTL is dropped). Without `job_ids`, the oldest
        `limit` of them. Returns the ids requeued: ids not in this list, or whose record
        is gone, are not."""
        keys = self._keys(agent_type)
        kept = self._list_of(keys)
        if job_ids is None:
            job_ids = await self._connection.client.lrange(kept, -limit, -1)  # type: ignore[misc]
        requeued: builtins.list[str] = []
        for start in range(0, len(job_ids), BATCH):
            chunk = list(job_ids[start : start + BATCH])
            script_keys = [kept, keys.queue, keys.expiry, keys.stats, keys.waiting]
            for job_id in chunk:
                script_keys += [keys.job(job_id), keys.result(job_id)]
            requeued += await self._connection.run_script(
                self._connection.scripts.dead_requeue, script_keys, chunk
            )
        return requeued

    async def purge(self, agent_type: str, job_ids: Sequence[str] | None = None) -> int:
        """Delete kept jobs for good (record and result too); all of them without
        `job_ids`, BATCH per script call. Returns how many were purged: ids that were not
        in this list (never were, requeued, purged before) are not counted."""
        keys = self._keys(agent_type)
        kept = self._list_of(keys)
        client = self._connection.client
        purged = 0
        offset = 0
        while True:
            if job_ids is None:
                chunk: builtins.list[str] = await client.lrange(kept, -BATCH, -1)  # type: ignore[misc]
            else:
                chunk = list(job_ids[offset : offset + BATCH])
                offset += len(chunk)
            if not chunk:
                return purged
            script_keys = [kept]
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

    def _list(self, agent_type: str) -> str:
        key: str = self._list_of(self._keys(agent_type))
        return key


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _history(text: str | None) -> builtins.list[dict[str, Any]]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return value if isinstance(value, builtins.list) else []


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
