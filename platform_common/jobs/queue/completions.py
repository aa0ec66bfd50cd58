"""Completion events for the orchestrator, with none missed across a dropped connection.

Pub/sub is at-most-once: a message published while the subscriber is disconnected is
gone. So the subscriber subscribes to `agent:*:completed` FIRST, then re-reads the
results of the jobs it waits for, and does that again every time the subscription is
confirmed after a reconnect. A result is always stored before its event is published,
so a job that finished in a gap is found by the re-read.

Redis failures come out in the package's terms: a dropped connection or a failover is
waited out (reconnect, re-subscribe, re-read), and only a Redis that stays unreachable
or refusing for `outage_timeout` seconds ends `anext()` with BackendUnavailable. The
iterator survives it: the next `anext()` reconnects and re-reads."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from ..errors import BackendUnavailable
from ..keys import COMPLETION_PATTERN, QueueKeys
from ..redis.url import RedisClient
from ..status import QUEUE_TERMINAL
from .backend_errors import is_outage, unreachable
from .connection import QueueConnection
from .log_text import describe
from .results import JobResult, parse_result

__all__ = ["Completion", "Completions"]

RECENT = 10_000
"""How many delivered job ids are remembered, so a re-read never yields one twice."""
OUTAGE_TIMEOUT = 60.0
"""Seconds Redis may stay unreachable (or keep refusing) before `anext()` raises
BackendUnavailable: longer than a Sentinel or Cluster failover, short enough that a
caller waiting on completions learns of a real outage."""
_FAILURES = (RedisError, OSError, RedisClusterException)


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
    missed during a disconnect, pub/sub being at-most-once).

    A job id may be reused once its previous job's result is gone: `watch()` it again
    after enqueueing the new job and the new job's outcome is yielded (once), even if
    the previous one was yielded before."""

    def __init__(
        self,
        connection: QueueConnection,
        *,
        watch: Iterable[tuple[str, str]] = (),
        every_job: bool = False,
        poll_timeout: float = 1.0,
        outage_timeout: float = OUTAGE_TIMEOUT,
    ) -> None:
        self._connection = connection
        self._every_job = every_job
        self._poll_timeout = poll_timeout
        self._outage_timeout = outage_timeout
        self._watched: set[tuple[str, str]] = set(watch)
        self._ready: deque[Completion] = deque()
        self._recent: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Watched again after a delivery: an event that finds no result is the earlier
        # job's (its result removed to free the id), never the new job's, which stores
        # its result before it publishes.
        self._rewatched: set[tuple[str, str]] = set()
        self._client: RedisClient | None = None
        self._pubsub: Any = None
        self._closed = False
        self._resync_due = False
        self.resyncs = 0
        """How many times the state was re-read (first subscribe + every reconnect)."""

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

    def __aiter__(self) -> Completions:
        return self

    async def __anext__(self) -> Completion:
        delay = 0.05
        failing_since: float | None = None
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closed:
                raise StopAsyncIteration
            try:
                await self._subscribe()
                if self._resync_due:
                    await self._resync()
                    self._resync_due = False
                message = await self._pubsub.get_message(timeout=self._poll_timeout)
                delay, failing_since = 0.05, None
                if message is None:
                    continue
                if message["type"] == "psubscribe":
                    self._resync_due = True
                elif message["type"] == "pmessage":
                    agent_type = str(message["channel"]).split(":")[1]
                    await self._deliver(agent_type, str(message["data"]))
            except _FAILURES as exc:
                # Subscribe afresh and re-read: a failed re-read or delivery (a failover
                # in progress) must not end the stream, and the re-read also finds an
                # undelivered job. Afresh, because a refused PSUBSCRIBE (its error comes
                # back as a message) would leave a subscription that never delivers.
                self._resync_due = True
                await self._unsubscribe()
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self._outage_timeout:
                    raise self._backend_error(exc) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def resync(self) -> None:
        """Re-read the result of every watched job; queue those that finished.
        BackendUnavailable if Redis cannot be reached or refuses."""
        try:
            await self._resync()
        except _FAILURES as exc:
            raise self._backend_error(exc) from exc

    async def _resync(self) -> None:
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

    def _backend_error(self, exc: BaseException) -> BackendUnavailable:
        """The package's error for a failed Redis call: the producer's for an outage;
        a refusal (NOPERM, WRONGTYPE, BUSY...) says so, with Redis' words."""
        if isinstance(exc, BackendUnavailable):  # BackendBusy: a full pool, said so already
            return exc
        settings = self._connection.settings.redis
        if is_outage(exc):
            return unreachable(settings, exc)
        return BackendUnavailable(
            f"Redis at {settings.redacted_url()} refused to serve completions: {describe(exc)}"
        )

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

    async def _subscribe(self) -> None:
        if self._pubsub is not None:
            return
        # Its own connection: a subscribed connection can serve nothing else.
        client = self._connection.subscriber_client()
        self._client = client
        self._pubsub = client.pubsub()
        await self._pubsub.psubscribe(COMPLETION_PATTERN)

    async def _unsubscribe(self) -> None:
        pubsub, client = self._pubsub, self._client
        self._pubsub = self._client = None
        with contextlib.suppress(*_FAILURES):  # closing a broken connection may fail too
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()

    async def aclose(self) -> None:
        self._closed = True
        await self._unsubscribe()

    async def __aenter__(self) -> Completions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
