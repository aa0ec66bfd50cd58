"""Completion events for the orchestrator, with none missed across a dropped connection.

Each time its subscription to `agent:*:completed` is confirmed (first subscribe and every
reconnect, queue/subscription.py), the stream re-reads the results of the jobs it waits
for. A result is always stored before its event is published, so a job that finished in
a gap is found by the re-read."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..keys import COMPLETION_PATTERN, QueueKeys
from ..status import QUEUE_TERMINAL
from .connection import QueueConnection
from .results import JobResult, parse_result
from .subscription import OUTAGE_TIMEOUT, ResubscribingStream

__all__ = ["OUTAGE_TIMEOUT", "Completion", "Completions"]

RECENT = 10_000
"""How many delivered job ids are remembered, so a re-read never yields one twice."""


@dataclass(frozen=True, slots=True)
class Completion:
    """A job reached a terminal state (status.QUEUE_TERMINAL): the event its end publishes."""

    agent_type: str
    """The agent type whose queue ran it."""
    job_id: str
    """The job's id (unique within its agent type)."""
    result: JobResult | None
    """How it ended; None if its result's TTL passed before it was read."""


class Completions(ResubscribingStream[Completion]):
    """An async iterator of completions.

    `watch(agent_type, job_id)` the jobs you wait for: each is yielded exactly once,
    even if it finished before you iterated or while the connection was down.
    With `every_job=True` every event is yielded as well (jobs not watched can be
    missed during a disconnect, pub/sub being at-most-once).

    A job id may be reused once its previous job's result is gone: `watch()` it again
    after enqueueing the new job and the new job's outcome is yielded (once), even if
    the previous one was yielded before."""

    _confirmed = "psubscribe"
    _serving = "completions"

    def __init__(
        self,
        connection: QueueConnection,
        *,
        watch: Iterable[tuple[str, str]] = (),
        every_job: bool = False,
        poll_timeout: float = 1.0,
        outage_timeout: float = OUTAGE_TIMEOUT,
    ) -> None:
        super().__init__(connection, poll_timeout=poll_timeout, outage_timeout=outage_timeout)
        self._every_job = every_job
        self._watched: set[tuple[str, str]] = set(watch)
        self._recent: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Watched again after a delivery: an event that finds no result is the earlier
        # job's (its result removed to free the id), never the new job's, which stores
        # its result before it publishes.
        self._rewatched: set[tuple[str, str]] = set()

    def watch(self, agent_type: str, job_id: str) -> None:
        """Wait for this job too. Watching after it finished is fine: it is found on
        the next re-read (call `resync()` to force one). Watching an id yielded before
        waits for its next job (see the class docstring)."""
        identity = (agent_type, job_id)
        if identity in self._recent:
            del self._recent[identity]
            self._rewatched.add(identity)
        self._watched.add(identity)

    @property
    def pending(self) -> frozenset[tuple[str, str]]:
        """Watched jobs not yielded yet."""
        return frozenset(self._watched)

    async def _subscribe_to(self, pubsub: Any) -> None:
        await pubsub.psubscribe(COMPLETION_PATTERN)

    async def _on_message(self, message: dict[str, Any]) -> None:
        if message["type"] == "pmessage":
            agent_type = str(message["channel"]).split(":")[1]
            await self._deliver(agent_type, str(message["data"]))

    async def _resync(self) -> None:
        """Re-read the result of every watched job; queue those that finished."""
        self.resyncs += 1
        waiting = sorted(self._watched)
        if not waiting:
            return
        connection = self._connection
        pipe = connection.client.pipeline(transaction=False)
        for agent_type, job_id in waiting:
            pipe.get(connection.keys(agent_type).result(job_id))
        for (agent_type, job_id), text in zip(waiting, await pipe.execute(), strict=True):
            if text is not None:
                self._queue(agent_type, job_id, parse_result(agent_type, job_id, text))

    async def _deliver(self, agent_type: str, job_id: str) -> None:
        identity = (agent_type, job_id)
        if identity in self._recent or (not self._every_job and identity not in self._watched):
            return
        keys = self._connection.keys(agent_type)
        text = await self._connection.client.get(keys.result(job_id))
        if text is None and await self._stale_event(identity, keys, job_id):
            return
        result = parse_result(agent_type, job_id, text) if text is not None else None
        self._queue(agent_type, job_id, result)

    async def _stale_event(self, identity: tuple[str, str], keys: QueueKeys, job_id: str) -> bool:
        """An event whose job has no result: an earlier job of a reused id (its result
        removed), or the job's result outlived by a slow reader. Only the second is
        delivered (as result None): a re-watched id or a job that is live again (queued
        or running: state absent or not terminal) waits for its own event."""
        if identity in self._rewatched:
            return True
        pipe = self._connection.client.pipeline(transaction=False)
        pipe.hmget(keys.job(job_id), ["enqueued_at", "state"])
        pipe.hexists(keys.queued, job_id)  # waiting, still packed (queue/envelope.py)
        (enqueued_at, state), packed = await pipe.execute()
        return bool(packed) or (enqueued_at is not None and state not in QUEUE_TERMINAL)

    def _queue(self, agent_type: str, job_id: str, result: JobResult | None) -> None:
        identity = (agent_type, job_id)
        if identity in self._recent:
            return
        self._watched.discard(identity)
        self._rewatched.discard(identity)
        self._recent[identity] = None
        if len(self._recent) > RECENT:
            self._recent.popitem(last=False)
        self._ready.append(Completion(agent_type, job_id, result))
