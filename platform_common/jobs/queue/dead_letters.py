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
from ..redis.script import Script, pipeline_transport, run_batch
from ..status import QueueState
from .connection import QueueConnection

__all__ = ["ActedOn", "DeadLetter", "DeadLetters", "wire"]

BATCH = 500
"""Jobs per script call when requeueing or purging many (bounded work per call)."""

_DONE, _NEWER = 1, 2
"""The scripts' per-job codes (0: not a kept job of the list)."""


def wire(text: str) -> str | bytes:
    """`text` as Redis holds it. An id read from Redis that is not UTF-8 is carried as
    text with surrogate escapes (how Python decodes such bytes losslessly, and how it
    reads them from a command line): it goes back as the same bytes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")
    return text


@dataclass(frozen=True, slots=True)
class ActedOn:
    """What a requeue or purge did with each job it was given."""

    done: tuple[str, ...] = ()
    """Requeued or purged."""
    gone: tuple[str, ...] = ()
    """Not kept on the list (any more): requeued or purged meanwhile, its record gone
    (a stale entry is dropped) or in another state (the id of a new job)."""
    newer: tuple[str, ...] = ()
    """Kept, but ended after the moment given: left alone."""

    def __add__(self, other: ActedOn) -> ActedOn:
        return ActedOn(self.done + other.done, self.gone + other.gone, self.newer + other.newer)


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
        kept = self._list_of(self._keys(agent_type))
        return int(await self._connection.client.llen(kept))  # type: ignore[misc]

    async def list(self, agent_type: str, *, start: int = 0, count: int = 100) -> list[DeadLetter]:
        """Kept jobs newest first, `count` of them from position `start` (entries whose
        record is gone, purged or past its retention, are left out). Read undecoded: an id
        that is not UTF-8 comes as text with surrogate escapes (`wire` turns it back into
        the same bytes, so it can be requeued or purged), a stored text that is not as
        backslash escapes; neither is an error that would hide the other letters."""
        keys = self._keys(agent_type)
        send = pipeline_transport(self._connection.client, lambda _: True)
        (raw_ids,) = _raised(
            await run_batch(send, [("LRANGE", self._list_of(keys), start, start + count - 1)])
        )
        if not raw_ids:
            return []
        job_ids = [bytes(raw).decode("utf-8", "surrogateescape") for raw in raw_ids]
        fields = ("payload", "attempts", "last_error", "history", "finished_at")
        replies = _raised(
            await run_batch(send, [("HMGET", wire(keys.job(j)), *fields) for j in job_ids])
        )
        letters = []
        for job_id, raw in zip(job_ids, replies, strict=True):
            payload, attempts, error, history, dead_at = (_text(value) for value in raw)
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
        self,
        agent_type: str,
        job_ids: Sequence[str] | None = None,
        *,
        limit: int = BATCH,
        as_of: int | None = None,
    ) -> builtins.list[str]:
        """Put kept jobs back on the queue with fresh attempts and a fresh TTL window
        (counted as enqueued; the retention TTL is dropped). Without `job_ids`, the oldest
        `limit` of them. `as_of` (Redis ms): only jobs that ended no later are requeued.
        Returns the ids requeued: ids not in this list, or whose record is gone, are not."""
        if job_ids is None:
            kept = self._list_of(self._keys(agent_type))
            job_ids = await self._connection.client.lrange(kept, -limit, -1)  # type: ignore[misc]
        return list((await self.requeue_each(agent_type, job_ids, as_of=as_of)).done)

    async def purge(
        self, agent_type: str, job_ids: Sequence[str] | None = None, *, as_of: int | None = None
    ) -> int:
        """Delete kept jobs for good (record and result too); all of them without
        `job_ids`, BATCH per script call. `as_of` (Redis ms): only jobs that ended no
        later are purged. Returns how many were purged: ids that were not in this list
        (never were, requeued, purged before) are not counted."""
        if job_ids is not None:
            return len((await self.purge_each(agent_type, job_ids, as_of=as_of)).done)
        kept = self._list_of(self._keys(agent_type))
        purged = 0
        while True:
            chunk: builtins.list[str] = await self._connection.client.lrange(kept, -BATCH, -1)  # type: ignore[misc]
            if not chunk:
                return purged
            done = await self.purge_each(agent_type, chunk, as_of=as_of)
            purged += len(done.done)
            if done.newer or not (done.done or done.gone):
                return purged  # the rest of the list ended after `as_of`

    async def requeue_each(
        self, agent_type: str, job_ids: Sequence[str], *, as_of: int | None = None
    ) -> ActedOn:
        """requeue() of exactly these ids, BATCH per script call, saying what became of
        each: requeued, not kept (any more), or ended after `as_of` (Redis ms)."""
        keys = self._keys(agent_type)
        shared = [self._list_of(keys), keys.queue, keys.expiry, keys.stats, keys.waiting]
        return await self._each(
            self._connection.scripts.dead_requeue, keys, shared, job_ids, as_of, levels=True
        )

    async def purge_each(
        self, agent_type: str, job_ids: Sequence[str], *, as_of: int | None = None
    ) -> ActedOn:
        """purge() of exactly these ids, BATCH per script call, saying what became of
        each: purged, not kept (any more), or ended after `as_of` (Redis ms)."""
        keys = self._keys(agent_type)
        return await self._each(
            self._connection.scripts.dead_purge, keys, [self._list_of(keys)], job_ids, as_of
        )

    async def _each(
        self,
        script: Script,
        keys: QueueKeys,
        shared: builtins.list[str],
        job_ids: Sequence[str],
        as_of: int | None,
        *,
        levels: bool = False,
    ) -> ActedOn:
        """`levels`: the script takes the high and low lists after the jobs' keys, then
        fair share's ring."""
        outcome = ActedOn()
        for start in range(0, len(job_ids), BATCH):
            chunk = list(job_ids[start : start + BATCH])
            script_keys: builtins.list[str | bytes] = list(shared)
            for job_id in chunk:
                script_keys += [wire(keys.job(job_id)), wire(keys.result(job_id))]
            if levels:
                script_keys += [*keys.level_queues, keys.fair_ring]
            args = [self._state.value, "" if as_of is None else str(as_of)]
            codes = await self._connection.run_script(
                script, script_keys, [*args, *(wire(j) for j in chunk)]
            )
            outcome += ActedOn(
                tuple(j for j, c in zip(chunk, codes, strict=True) if c == _DONE),
                tuple(j for j, c in zip(chunk, codes, strict=True) if c not in (_DONE, _NEWER)),
                tuple(j for j, c in zip(chunk, codes, strict=True) if c == _NEWER),
            )
        return outcome

    def _keys(self, agent_type: str) -> QueueKeys:
        return self._connection.known_keys(agent_type)


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


def _raised(replies: builtins.list[Any]) -> builtins.list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else bytes(raw).decode("utf-8", "backslashreplace")


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
