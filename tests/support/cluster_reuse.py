"""Run a single-server test module unchanged on the session Redis Cluster.

A cluster test module imports `reused_tests(source, skip)` into its globals and the two
fixtures below, which shadow conftest's `redis_url` / `redis_client` so every reused
test talks to the cluster instead of the plain server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import pytest

from platform_common.jobs.redis.url import RedisSettings
from tests.support.stores import Harness

__all__ = ["harness", "redis_client", "redis_url", "reused_tests"]


def reused_tests(
    source: ModuleType, skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Every `test_*` function of `source` except those named in `skip`."""
    unknown = skip - set(dir(source))
    assert not unknown, f"skip names tests that do not exist: {sorted(unknown)}"
    return {n: getattr(source, n) for n in dir(source) if n.startswith("test_") and n not in skip}


@pytest.fixture
def redis_url(cluster_url: str) -> str:
    return cluster_url


@pytest.fixture
async def redis_client(cluster_url: str) -> AsyncIterator[Any]:
    client = RedisSettings.from_url(cluster_url).make_client()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def harness(cluster_url: str) -> AsyncIterator[Harness]:
    """The JobStore suites' harness, its stores and raw client on the cluster."""
    raw: Any = RedisSettings.from_url(cluster_url).make_client()
    harness = Harness("redis", redis_url=cluster_url, raw=raw)
    try:
        yield harness
    finally:
        await harness.aclose()
