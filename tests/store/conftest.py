"""The JobStore harness, parametrized over its backends: `memory` (a fake clock), `redis`
(the session redis-server) and `cluster` (the session Redis Cluster), and `valkey` (the
session valkey-server) for a test marked `valkey`. A test marked
`@pytest.mark.single_node(...)` gets no cluster run. `store` is one store of the
harness, made with the options of the test's (or module's) `@pytest.mark.store(...)`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from platform_common.jobs.redis.url import RedisClient, RedisSettings
from platform_common.jobs.store.contract import BaseJobStore
from tests.support.backends import CLUSTER, VALKEY, parametrize_backends
from tests.support.stores import Harness

MEMORY, REDIS = "memory", "redis"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc, "store_backend", (MEMORY, REDIS, CLUSTER))


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    """`memory`, `redis`, `cluster` or `valkey` (generated above)."""
    backend: str = request.param
    return backend


@pytest.fixture
async def harness(store_backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """Makes stores of the backend (closed after the test), with its raw client."""
    url: str | None = None
    raw: RedisClient | None = None
    if store_backend in (REDIS, VALKEY):
        url = request.getfixturevalue("single_node_url" if store_backend == REDIS else "valkey_url")
        raw = aioredis.Redis.from_url(url, decode_responses=True)
    elif store_backend == CLUSTER:
        url = request.getfixturevalue("cluster_url")
        raw = RedisSettings.from_url(url).make_client()
    made = Harness(MEMORY if url is None else REDIS, redis_url=url, raw=raw)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def store(harness: Harness, request: pytest.FixtureRequest) -> BaseJobStore:
    marker = request.node.get_closest_marker("store")
    return harness.make(**(marker.kwargs if marker else {}))
