"""Shared fixtures: a private redis-server per test session, flushed before every test.

Servers are started by the suite on free ports (never the machine's own Redis).
Variants (AOF, TLS, ACL, cluster) have their own fixtures in the tests that need them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from platform_common.jobs.testing import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session server, emptied first so every test starts clean."""
    client = redis.Redis(port=redis_server.port)
    try:
        client.flushall()
        client.script_flush()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()
