"""A command lane: one held connection that runs commands in order, pipelining those
issued concurrently. The hot path of enqueue, claim and complete runs through it.

Why: redis-py's per-command path (pool checkout, retry wrapper, Python packing) costs
more than the round trip itself on a small machine. A held connection with hiredis
packing halves a single call's cost, and callers that overlap (a worker completing N
jobs at once) share one write and one read loop instead of N round trips.

Every command sent here must be safe to repeat: on a dropped connection the call is
retried. The queue scripts recognise their own replays (by nonce or lease token); a
repeated LMOVE at worst leaves an extra id in processing for the reaper to return."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .scripts import QueueScript

__all__ = ["CommandLane"]

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
RETRIES = 3


class CommandLane:
    """Runs commands on one connection taken from `client`'s pool (given back on close)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._pool = client.connection_pool
        self._connection: AbstractConnection | None = None
        self._busy = False
        self._pending: deque[tuple[bytes, int, asyncio.Future[list[Any]]]] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._closed = False

    async def execute(self, *args: Any) -> Any:
        """Run one command; dropped connections are retried RETRIES times with backoff."""
        replies = await self._with_retries(hiredis.pack_command(args), 1)
        if isinstance(replies[0], ResponseError):
            raise replies[0]
        return replies[0]

    async def execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Run commands back to back (one write); a command's error is returned in its
        place, like a pipeline with raise_on_error=False."""
        if not commands:
            return []
        packed = b"".join(hiredis.pack_command(tuple(command)) for command in commands)
        return await self._with_retries(packed, len(commands))

    async def run_script(
        self, script: QueueScript, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """EVALSHA `script`; on NOSCRIPT (flush, restart, failover) load it and retry once."""
        sha = await script.digest(list(keys))
        try:
            return await self.execute("EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:
            script.forget()
            sha = await script.digest(list(keys))
            return await self.execute("EVALSHA", sha, len(keys), *keys, *args)

    async def _with_retries(self, packed: bytes, count: int) -> list[Any]:
        delay = 0.05
        for attempt in range(RETRIES + 1):
            try:
                return await self._submit(packed, count)
            except _TRANSIENT:
                if attempt == RETRIES or self._closed:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 4, 2.0)
        raise AssertionError("unreachable")

    async def _submit(self, packed: bytes, count: int) -> list[Any]:
        if self._busy:
            future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
            self._pending.append((packed, count, future))
            return await future
        # Idle: send and read inline, the cheapest path for a lone caller.
        self._busy = True
        try:
            connection = await self._connect()
            await _send(connection, packed)
            return [await _read(connection) for _ in range(count)]
        except BaseException:
            await self._reset()
            raise
        finally:
            if self._pending:
                self._drainer = asyncio.create_task(self._drain())
            else:
                self._busy = False

    async def _drain(self) -> None:
        """Send everything queued while the connection was busy in one write, then read
        the replies in order; repeat until nothing is queued."""
        try:
            while self._pending:
                batch = list(self._pending)
                self._pending.clear()
                try:
                    connection = await self._connect()
                    await _send(connection, b"".join(packed for packed, _, _ in batch))
                    for _, count, future in batch:
                        replies = [await _read(connection) for _ in range(count)]
                        if not future.done():
                            future.set_result(replies)
                except BaseException as exc:
                    await self._reset()
                    error = exc if isinstance(exc, Exception) else RedisConnectionError("closed")
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    if not isinstance(exc, Exception):
                        raise
        finally:
            self._busy = False

    async def _connect(self) -> AbstractConnection:
        if self._closed:
            raise RedisConnectionError("command lane is closed")
        if self._connection is None:
            self._connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        if not self._connection.is_connected:
            await self._connection.connect()
        return self._connection

    async def _reset(self) -> None:
        # The reply stream is in an unknown state: drop the socket, reconnect on next use.
        if self._connection is not None:
            await self._connection.disconnect(nowait=True)

    async def aclose(self) -> None:
        self._closed = True
        if self._drainer is not None and not self._drainer.done():
            await asyncio.wait({self._drainer}, timeout=5)
        for _, _, future in self._pending:
            if not future.done():
                future.set_exception(RedisConnectionError("command lane is closed"))
        self._pending.clear()
        if self._connection is not None:
            await self._pool.release(self._connection)
            self._connection = None


async def _send(connection: AbstractConnection, packed: bytes) -> None:
    """Write `packed`, waiting only when the socket's buffer is full.

    redis-py's send_packed_command wraps every write in asyncio.wait_for when the
    connection has a socket timeout, which on Python 3.11 costs a Task and two event
    loop turns per command: more than the round trip of a small command. A write to a
    connected socket almost always goes straight to the kernel, so the timeout is
    needed only around drain() when the transport holds data back."""
    writer = getattr(connection, "_writer", None)
    if writer is None or writer.transport.is_closing():
        # Not connected, or a redis-py without the attribute: the library's own path.
        await connection.send_packed_command(packed, check_health=False)
        return
    try:
        writer.write(packed)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(connection.socket_timeout):
                await writer.drain()
    except TimeoutError:
        await connection.disconnect(nowait=True)
        raise RedisTimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        await connection.disconnect(nowait=True)
        raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc


async def _read(connection: AbstractConnection) -> Any:
    """One reply; an error reply is returned (the stream stays in step), not raised."""
    try:
        return await connection.read_response()
    except ResponseError as exc:
        return exc
