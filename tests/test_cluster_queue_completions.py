"""The queue's completion-event tests, unchanged, on the real 3-master cluster.

The tests are imported from tests/test_queue_completions.py; only `redis_url` (and the raw
`redis_client`) now point at the session cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from platform_common.jobs.connection import RedisSettings
from tests import test_queue_completions as source

# These probe one server directly (redis-cli CLIENT KILL, PUBSUB NUMPAT, which a cluster
# client does not offer); completions across a cluster failover are in
# test_cluster_failover.py.
SKIP = {
    "test_completions_across_a_killed_subscriber_connection",
    "test_every_job_mode_yields_unwatched_events",
}
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
