"""The exporter, unchanged, on a real 3-master cluster: exact numbers for types spread
over every shard, and one pipelined round trip per node in the steady state."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from redis.asyncio.connection import Connection

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs_exporter.reader import make_exporter_client
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.fair_share_data import enqueue_keyed
from tests.support.redis_cluster import RedisClusterNodes

# The five default types land on all three shards of a default 3-master cluster
# (docs/operations.md, "Sizing").
TYPES = ("dining", "experiences", "transportation", "flights", "dmc")


class NodeCountingConnection(Connection):
    """Counts socket writes per node: one per command, or one per pipeline batch."""

    sends: Counter[int] = Counter()

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends[self.port] += 1
        await super().send_packed_command(command, check_health)


@pytest.fixture
def redis_url(cluster_url: str) -> str:
    """The Redis of this file's tests (and of the folder's `admin`): the cluster."""
    return cluster_url


@pytest.fixture
async def exporter(cluster_url: str) -> AsyncIterator[Exporter]:
    """This file's exporter (overriding the folder's): its sends counted per node."""
    settings = ExporterSettings.from_args(["--redis-url", cluster_url])
    client = make_exporter_client(settings)
    # Cluster nodes take their connection class from the client's kwargs.
    client.connection_kwargs["connection_class"] = NodeCountingConnection  # type: ignore[union-attr]
    instance = Exporter(settings, client)
    try:
        yield instance
    finally:
        await instance.aclose()


def seed(admin: redis.RedisCluster, agent_type: str, number: int) -> None:
    keys = QueueKeys(agent_type)
    admin.sadd(QueueKeys.types_key(), agent_type)
    waiting = [f"{agent_type}-w{i}" for i in range(number + 1)]
    admin.lpush(keys.queue, *waiting)
    admin.zadd(keys.waiting, {job_id: 1_000 + i for i, job_id in enumerate(waiting)})
    admin.lpush(keys.dead, *[f"{agent_type}-x{i}" for i in range(number)] or ["x"])
    admin.hset(keys.stats, mapping={"enqueued": 10 * number, "completed": number})


async def test_exact_numbers_and_one_round_trip_per_node(
    admin: redis.RedisCluster, exporter: Exporter, redis_cluster: RedisClusterNodes
) -> None:
    for number, agent_type in enumerate(TYPES, start=1):
        seed(admin, agent_type, number)
    owners = {redis_cluster.master_for_key(QueueKeys(t).queue).port for t in TYPES}
    assert len(owners) == 3, "the test types should cover every shard"

    first = await exporter.scrape()  # discovers the types (and caches the script)
    assert first.snapshot is not None
    NodeCountingConnection.sends.clear()
    result = await exporter.scrape()
    snapshot = result.snapshot
    assert snapshot is not None
    by_type = {t.agent_type: t for t in snapshot.types}
    assert sorted(by_type) == sorted(TYPES)
    for number, agent_type in enumerate(TYPES, start=1):
        shown = by_type[agent_type]
        assert shown.queue_depth == number + 1
        assert shown.dead_letter_depth == number
        assert shown.counters["enqueued"] == 10 * number
        assert shown.counters["completed"] == number
    assert snapshot.round_trips == 1
    types_node = redis_cluster.master_for_key(QueueKeys.types_key()).port
    assert set(NodeCountingConnection.sends) == owners | {types_node}
    assert all(count == 1 for count in NodeCountingConnection.sends.values()), (
        NodeCountingConnection.sends
    )


async def test_fair_share_read_on_the_shards_of_its_types(
    admin: redis.RedisCluster, cluster_url: str, redis_cluster: RedisClusterNodes
) -> None:
    # Two fair types on two shards, enqueued by the real JobQueue; their since hashes and
    # key lists read in the cluster pipeline, each routed to its type's shard.
    fair = ("dining", "flights")
    shards = {redis_cluster.master_for_key(QueueKeys(t).fair_since).port for t in fair}
    assert len(shards) == 2
    queue = await JobQueue.connect(cluster_url)
    try:
        for agent_type in fair:
            await queue.set_limits(agent_type, fair_by="tenant")
            await enqueue_keyed(queue, agent_type, {"acme": 3, "globex": 1})
    finally:
        await queue.aclose()
    admin.hset(QueueKeys("flights").fair_since, "acme", "1")  # waiting since 1970
    settings = ExporterSettings.from_args(["--redis-url", cluster_url, "--fair-key-top", "1"])
    exporter = Exporter(settings)
    try:
        result = await exporter.scrape()
    finally:
        await exporter.aclose()
    assert result.snapshot is not None and result.snapshot.malformed == 0
    by_type = {t.agent_type: t.fair for t in result.snapshot.types}
    for agent_type in fair:
        shown = by_type[agent_type]
        assert shown is not None and shown.keys_waiting == 2
        assert shown.top_backlogs == (("acme", 3),)
    flights = by_type["flights"]
    assert flights is not None and flights.oldest_wait_seconds is not None
    assert flights.oldest_wait_seconds > 1_700_000_000  # seconds since 1970: the planted 1 ms
