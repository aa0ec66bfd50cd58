"""The one pool policy: a caller waits for a free connection up to `pool_timeout`, then
gets BackendBusy (never "unreachable": Redis may be perfectly healthy).

redis-py's default pool raises MaxConnectionsError (a ConnectionError) the moment it is
full, which every caller reported as "Redis unreachable"; its BlockingConnectionPool
waits, but then raises a plain ConnectionError and costs more on every checkout.
Single-node and Sentinel clients get the waiting pools below; a cluster client keeps
one pool per node, so ClusterClient (clients.py) waits at a ConnectionGate instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import MaxConnectionsError

from ..errors import BackendBusy

__all__ = ["ConnectionGate", "WaitingConnectionPool", "WaitingSentinelPool"]


def _busy(max_connections: int, timeout: float | None) -> BackendBusy:
    return BackendBusy(
        f"all {max_connections} pooled Redis connections stayed in use for {timeout} s "
        "(raise max_connections or pool_timeout, or lower the concurrency)"
    )


class WaitingConnectionPool(aioredis.ConnectionPool):
    """A ConnectionPool that, when full, waits for a released connection up to
    `timeout` seconds (then BackendBusy) instead of raising MaxConnectionsError; when a
    connection is free it costs what redis-py's plain pool costs."""

    def __init__(self, *, timeout: float | None = 5.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except MaxConnectionsError:
            pass
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        while True:
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise _busy(self.max_connections, self.timeout) from None
            finally:
                if not waiter.done():
                    waiter.cancel()
            try:
                return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            except MaxConnectionsError:
                continue  # a caller on the fast path took it first; wait again

    async def release(self, connection: Any) -> None:
        await super().release(connection)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break


class WaitingSentinelPool(SentinelConnectionPool, WaitingConnectionPool):
    """The master's pool behind Sentinel, waiting like WaitingConnectionPool."""


_HELD: ContextVar[frozenset[int]] = ContextVar("redis_gates_held", default=frozenset())


class ConnectionGate:
    """At most `limit` operations at once; the next waits up to `timeout` seconds.

    Re-entrant per task: an operation that issues another one through the same client
    (a cluster pipeline re-initialising the slot map) does not wait for itself."""

    def __init__(self, limit: int, timeout: float | None) -> None:
        self.limit = limit
        self.timeout = timeout
        self._slots = asyncio.Semaphore(limit)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        held = _HELD.get()
        if id(self) in held:
            yield
            return
        try:
            async with asyncio.timeout(self.timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise _busy(self.limit, self.timeout) from None
        token = _HELD.set(held | {id(self)})
        try:
            yield
        finally:
            _HELD.reset(token)
            self._slots.release()
