"""One pipelined request on one pooled connection, its replies read straight off the
connection's parser: a scrape's round trip to a single Redis server (or Sentinel's
master).

redis-py's pipeline spends ~13 us of Python on every command (queueing, packing, then
per reply an asyncio timeout, parse_response and a response callback): 90 ms for the
7,000 commands of a 1,000-type scrape, against 5-15 ms of Redis' own. Here the caller
sends bytes it packed once, and the replies are read in one loop under one deadline,
each error reply in place as from a pipeline with raise_on_error=False. No response
callbacks run, so replies are raw: TIME a list of two strings, INFO its text, HGETALL a
flat list in RESP2; the reader takes those shapes.

Not for a cluster: its pipeline routes by slot and follows MOVED, which this does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from platform_common.jobs.redis.internals import reply_parser

__all__ = ["pack", "send_and_read"]


def pack(commands: Iterable[tuple[Any, ...]]) -> bytes:
    """`commands` in the Redis protocol, ready for send_and_read (str as UTF-8, like the
    exporter's client)."""
    return b"".join(hiredis.pack_command(command) for command in commands)


async def send_and_read(client: aioredis.Redis, request: bytes, replies: int) -> list[Any]:
    """Send `request` (`replies` packed commands) on one connection of `client`'s pool
    and read every reply: one round trip. A dropped connection (a Redis restart) is
    replaced and the request sent again as the client's retry policy allows, as its
    own pipeline would; error replies come back in place."""
    pool = client.connection_pool
    connection: AbstractConnection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        result: list[Any] = await connection.retry.call_with_retry(
            lambda: _exchange(connection, request, replies),
            lambda _error: connection.disconnect(),
        )
        return result
    finally:
        await pool.release(connection)


async def _exchange(connection: AbstractConnection, request: bytes, count: int) -> list[Any]:
    await connection.send_packed_command(request)  # connects first when it must
    # The parser's own read (hiredis or Python): error replies are returned, not raised.
    # redis-py's Connection.read_response adds an asyncio timeout per reply, the cost
    # this module avoids; one deadline covers them all instead.
    parser = reply_parser(connection)
    replies: list[Any] = []
    try:
        async with asyncio.timeout(connection.socket_timeout):
            for _ in range(count):
                replies.append(await parser.read_response())
    except TimeoutError:
        await connection.disconnect(nowait=True)
        raise RedisTimeoutError(f"Timeout reading from {_where(connection)}") from None
    except OSError as exc:
        # A reset socket: the retryable ConnectionError redis-py's own read raises.
        await connection.disconnect(nowait=True)
        raise RedisConnectionError(f"Error reading from {_where(connection)}: {exc}") from exc
    except BaseException:
        # Cancelled (the scrape's deadline) or a closed connection: replies may be left
        # unread on the socket, so the connection must not go back to the pool as is.
        await connection.disconnect(nowait=True)
        raise
    return replies


def _where(connection: AbstractConnection) -> str:
    return f"{getattr(connection, 'host', '?')}:{getattr(connection, 'port', '?')}"
