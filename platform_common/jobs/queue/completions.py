"""Completion events for the orchestrator, with none missed across a dropped connection.

Pub/sub is at-most-once: a message published while the subscriber is disconnected is
gone. So the subscriber subscribes to `agent:*:completed` FIRST, then re-reads the
results of the jobs it waits for, and does that again every time the subscription is
confirmed after a reconnect. A result is always stored before its event is published,
so a job that finished in a gap is found by the re-read."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from ..keys import COMPLETION_PATTERN
from ..redis.url import RedisClient
from .connection import QueueConnection
from .results import JobResult, parse_result

__all__ = ["Completion", "Completions"]

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


class Completions:
    """An async iterator of completions.

    `watch(agent_type, job_id)` the jobs you wait for: each is yielded exactly once,
    even if it finished before you iterated or while the connection was down.
    With `every_job=True` every event is yielded as well (jobs not watched can be
    missed during a disconnect, pub/sub being at-most-once)."""

    def __init__(
        self,
        connection: QueueConnection,
        *,
        watch: Iterable[tuple[str, str]] = (),
        every_job: bool = False,
        poll_timeout: float = 1.0,
    ) -> None:
        self._connection = connection
        self._every_job = every_job
        self._poll_timeout = poll_timeout
        self._watched: set[tuple[str, str]] = set(watch)
        self._ready: deque[Completion] = deque()
        self._recent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._client: RedisClient | None = None
        self._pubsub: Any = None
        self._closed = False
        self._resync_due = False
        self.resyncs = 0
        """How many times the state was re-read (first subscribe + every reconnect)."""

    def watch(self, agent_type: str, job_id: str) -> None:
        """Wait for this job too. Watching after it finished is fine: it is found on
        the next re-read (call `resync()` to force one)."""
        if (agent_type, job_id) not in self._recent:
            self._watched.add((agent_type, job_id))

    @property
    def pending(self) -> frozenset[tuple[str, str]]:
        """Watched jobs not yielded yet."""
        return frozenset(self._watched)

    def __aiter__(self) -> Completions:
        return self

    async def __anext__(self) -> Completion:
        delay = 0.05
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closed:
                raise StopAsyncIteration
            try:
                await self._subscribe()
                if self._resync_due:
                    await self.resync()
                    self._resync_due = False
                message = await self._pubsub.get_message(timeout=self._poll_timeout)
                delay = 0.05
                if message is None:
                    continue
                if message["type"] == "psubscribe":
                    self._resync_due = True
                elif message["type"] == "pmessage":
                    agent_type = str(message["channel"]).split(":")[1]
                    await self._deliver(agent_type, str(message["data"]))
            except (RedisError, OSError):
                # The next get_message reconnects and re-subscribes, and the re-read runs
                # again: a failed re-read or delivery (a failover in progress) must not
                # end the stream, and the re-read also finds an undelivered job.
                self._resync_due = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def resync(self) -> None:
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
        text = await self._connection.client.get(self._connection.keys(agent_type).result(job_id))
        result = parse_result(agent_type, job_id, text) if text is not None else None
        self._queue(agent_type, job_id, result)

    def _queue(self, agent_type: str, job_id: str, result: JobResult | None) -> None:
        identity = (agent_type, job_id)
        if identity in self._recent:
            return
        self._watched.discard(identity)
        self._recent[identity] = None
        if len(self._recent) > RECENT:
            self._recent.popitem(last=False)
        self._ready.append(Completion(agent_type, job_id, result))

    async def _subscribe(self) -> None:
        if self._pubsub is not None:
            return
        # Its own connection: a subscribed connection can serve nothing else.
        client = self._connection.subscriber_client()
        self._client = client
        self._pubsub = client.pubsub()
        await self._pubsub.psubscribe(COMPLETION_PATTERN)

    async def aclose(self) -> None:
        self._closed = True
        if self._pubsub is not None:
            await self._pubsub.aclose()
        if self._client is not None:
            await self._client.aclose()

    async def __aenter__(self) -> Completions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
