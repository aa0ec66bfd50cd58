"""The queue's dead-letter tests (list, requeue, purge), unchanged, on the real 3-master cluster.

The tests are imported from tests/test_queue_dead_letters.py; only `redis_url` (and the raw
`redis_client`) now point at the session cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from platform_common.jobs.connection import RedisSettings
from tests import test_queue_dead_letters as source

SKIP: set[str] = set()
globals().update(
    {n: getattr(source, n) for n in dir(source) if n.startswith("test_") and n not in SKIP}
)
queue = source.queue


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
