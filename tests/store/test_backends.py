"""The harness runs on the backend its param names: no silent fallback from the cluster
to the single server, or from Redis to memory."""

from __future__ import annotations

from redis.asyncio.cluster import RedisCluster

from platform_common.jobs import InMemoryJobStore, RedisJobStore
from tests.support.stores import Harness


async def test_the_harness_runs_on_the_backend_it_names(
    store_backend: str, harness: Harness
) -> None:
    made = harness.make()
    await made.create("probe", ttl_seconds=60)
    if store_backend == "memory":
        assert isinstance(made, InMemoryJobStore) and harness.raw is None
        return
    assert isinstance(made, RedisJobStore)
    assert harness.raw is not None
    assert await harness.raw.exists(made.keys.record("probe")) == 1
    on_cluster = isinstance(harness.raw, RedisCluster)
    assert on_cluster == (store_backend == "cluster")
    assert made.settings.cluster == on_cluster
    if isinstance(harness.raw, RedisCluster):
        # The record lives on the slot of the agent's hash tag, one of three masters.
        assert len(harness.raw.get_primaries()) == 3
