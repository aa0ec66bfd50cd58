"""The queue tests run where their param says: `cluster` on the 3-master cluster (no
silent fallback to the single server), `single` on one server."""

from __future__ import annotations

from redis.asyncio.cluster import RedisCluster

from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient


async def test_the_queue_and_the_raw_client_use_the_named_backend(
    redis_backend: str, redis_url: str, redis_client: RedisClient
) -> None:
    queue = await JobQueue.connect(redis_url)
    try:
        assert await queue.ping() is True
        assert await redis_client.ping() is True
        on_cluster = redis_backend == "cluster"
        assert isinstance(queue.connection.client, RedisCluster) == on_cluster
        assert isinstance(redis_client, RedisCluster) == on_cluster
        if isinstance(redis_client, RedisCluster):
            assert len(redis_client.get_primaries()) == 3
    finally:
        await queue.aclose()
