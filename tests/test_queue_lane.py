"""The command lane (the hot path's held connection) against a real Redis: replies
reach their own callers when calls overlap, a write too big for the socket buffer
arrives whole, a killed connection is replaced, and a dead server gives a typed error."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from platform_common.jobs.queue.lane import CommandLane
from tests.support.redis_server import RedisServer


@pytest.fixture
async def lane(redis_url: str) -> AsyncIterator[CommandLane]:
    client = aioredis.Redis.from_url(redis_url, socket_timeout=5)
    command_lane = CommandLane(client)
    try:
        yield command_lane
    finally:
        await command_lane.aclose()
        await client.aclose()


async def test_overlapping_calls_each_get_their_own_reply(lane: CommandLane) -> None:
    values = [f"value-{i}" for i in range(300)]
    replies = await asyncio.gather(*(lane.execute("ECHO", value) for value in values))
    assert [reply.decode() for reply in replies] == values


async def test_an_error_reply_goes_to_its_caller_only(lane: CommandLane) -> None:
    await lane.execute("SET", "text", "not a number")
    outcomes = await asyncio.gather(
        lane.execute("INCR", "counter"),
        lane.execute("INCR", "text"),
        lane.execute("INCR", "counter"),
        return_exceptions=True,
    )
    assert outcomes[0] == 1 and outcomes[2] == 2
    assert isinstance(outcomes[1], ResponseError)
    many = await lane.execute_many([("INCR", "text"), ("INCR", "counter")])
    assert isinstance(many[0], ResponseError) and many[1] == 3


async def test_a_write_bigger_than_the_socket_buffer_arrives_whole(
    lane: CommandLane, redis_client: aioredis.Redis
) -> None:
    # 16 MiB cannot go to the kernel in one send: the lane must wait for the drain.
    blob = os.urandom(8 * 1024 * 1024).hex()
    pending = [lane.execute("SET", "blob", blob), lane.execute("STRLEN", "blob")]
    assert await asyncio.gather(*pending) == [b"OK", len(blob)]
    assert await redis_client.get("blob") == blob


async def test_a_killed_connection_is_replaced_and_the_call_retried(
    lane: CommandLane, redis_server: RedisServer
) -> None:
    assert await lane.execute("CLIENT", "SETNAME", "the-lane") == b"OK"
    killed = redis_server.cli("CLIENT", "KILL", "TYPE", "normal")
    assert int(killed) >= 1
    assert await lane.execute("INCR", "after-kill") == 1
    # A new connection: the name set on the killed one is gone.
    assert await lane.execute("CLIENT", "GETNAME") is None


async def test_a_dead_server_gives_a_connection_error_not_a_hang() -> None:
    server = RedisServer().start()
    client = aioredis.Redis.from_url(server.url, socket_timeout=2)
    lane = CommandLane(client)
    try:
        assert await lane.execute("PING") in (True, b"PONG")
        server.stop()
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(lane.execute("PING"), timeout=30)
    finally:
        await lane.aclose()
        await client.aclose()
        server.cleanup()
