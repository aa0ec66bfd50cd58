"""What the completion and progress iterators share: a pub/sub subscription of its own
that re-reads the stored state each time it is confirmed, and Redis failures waited out.

Pub/sub is at-most-once: a message published while the subscriber is disconnected is
gone. So a stream subscribes FIRST, then re-reads what it waits for (`_resync`), and does
that again every time the subscription is confirmed after a reconnect. A dropped
connection or a failover is waited out (reconnect, re-subscribe, re-read); only a Redis
that stays unreachable or refusing for `outage_timeout` seconds ends `anext()` with
BackendUnavailable. The stream survives it: the next `anext()` reconnects and re-reads."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any, Generic, Self, TypeVar

from redis.exceptions import RedisClusterException, RedisError

from ..errors import BackendUnavailable
from ..redis.url import RedisClient
from .backend_errors import is_outage, unreachable
from .connection import QueueConnection
from .log_text import describe

__all__ = ["FAILURES", "OUTAGE_TIMEOUT", "ResubscribingStream"]

OUTAGE_TIMEOUT = 60.0
"""Seconds Redis may stay unreachable (or keep refusing) before `anext()` raises
BackendUnavailable: longer than a Sentinel or Cluster failover, short enough that a
caller waiting on events learns of a real outage."""
FAILURES = (RedisError, OSError, RedisClusterException)

Event = TypeVar("Event")


class ResubscribingStream(Generic[Event]):
    """An async iterator of `Event`s from one pub/sub subscription. A subclass says what
    it subscribes to (`_subscribe_to`, and the confirmation's message type), what a
    message yields (`_on_message`, which queues events with `_ready.append`) and how the
    stored state is re-read (`_resync`); `_serving` names what it serves in errors."""

    _confirmed = "subscribe"
    """The message type that confirms the subscription (then the state is re-read)."""
    _serving = "events"

    def __init__(
        self, connection: QueueConnection, *, poll_timeout: float, outage_timeout: float
    ) -> None:
        self._connection = connection
        self._poll_timeout = poll_timeout
        self._outage_timeout = outage_timeout
        self._ready: deque[Event] = deque()
        self._client: RedisClient | None = None
        self._pubsub: Any = None
        self._closed = False
        self._resync_due = False
        self.resyncs = 0
        """How many times the state was re-read (first subscribe + every reconnect)."""

    async def _subscribe_to(self, pubsub: Any) -> None:
        raise NotImplementedError

    async def _on_message(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _resync(self) -> None:
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
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
                if message["type"] == self._confirmed:
                    self._resync_due = True
                else:
                    await self._on_message(message)
            except FAILURES as exc:
                # Subscribe afresh and re-read: a failed re-read or delivery (a failover
                # in progress) must not end the stream, and the re-read also finds what
                # was missed. Afresh, because a refused (P)SUBSCRIBE (its error comes
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
        """Re-read the stored state now (see the subclass). BackendUnavailable if Redis
        cannot be reached or refuses."""
        try:
            await self._resync()
        except FAILURES as exc:
            raise self._backend_error(exc) from exc

    def _backend_error(self, exc: BaseException) -> BackendUnavailable:
        """The package's error for a failed Redis call: the producer's for an outage;
        a refusal (NOPERM, WRONGTYPE, BUSY...) says so, with Redis' words."""
        if isinstance(exc, BackendUnavailable):  # BackendBusy: a full pool, said so already
            return exc
        settings = self._connection.settings.redis
        if is_outage(exc):
            return unreachable(settings, exc)
        return BackendUnavailable(
            f"Redis at {settings.redacted_url()} refused to serve {self._serving}: {describe(exc)}"
        )

    async def _subscribe(self) -> None:
        if self._pubsub is not None:
            return
        # Its own connection: a subscribed connection can serve nothing else. On a
        # cluster any node will do: PUBLISH reaches every node.
        client = self._connection.subscriber_client()
        self._client = client
        self._pubsub = client.pubsub()
        await self._subscribe_to(self._pubsub)

    async def _unsubscribe(self) -> None:
        pubsub, client = self._pubsub, self._client
        self._pubsub = self._client = None
        with contextlib.suppress(*FAILURES):  # closing a broken connection may fail too
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()

    async def aclose(self) -> None:
        self._closed = True
        await self._unsubscribe()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
