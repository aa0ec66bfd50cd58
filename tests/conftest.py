"""Shared fixtures: a private redis-server per test session, flushed before every test.

Servers are started by the suite on free ports (never the machine's own Redis).
Variants (AOF, TLS, ACL, cluster) have their own fixtures in the tests that need them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer


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


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    """A real 3-master cluster with one replica each, started once per session (only
    when a test asks for it). Tests that kill a node restore it before they end."""
    cluster = RedisClusterNodes().start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture
def cluster_url(redis_cluster: RedisClusterNodes) -> str:
    """URL of the session cluster (every node a startup node), every master emptied."""
    redis_cluster.wait_healthy()
    for port in redis_cluster.master_ports():
        node = redis_cluster.node_by_port(port)
        node.cli("FLUSHALL")
        node.cli("SCRIPT", "FLUSH")
    return redis_cluster.url
