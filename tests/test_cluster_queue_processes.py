"""The queue's worker-process tests (SIGKILL, SIGSTOP past the lease, poison pill,
counters after a mixed workload of 2 workers and 2 producers), unchanged, on the real
3-master cluster.

The tests are imported from tests/test_queue_processes.py; only `redis_url` and the raw
`client` now point at the session cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import ClusterNode, RedisCluster

from platform_common.jobs.redis.url import RedisSettings
from tests import test_queue_processes as source
from tests.support.cluster_reuse import redis_url, reused_tests  # noqa: F401

# The first starts its own single server; the second never reaches Redis.
SKIP = {
    "test_workers_keep_consuming_after_client_kill_and_a_redis_restart",
    "test_the_cli_refuses_a_bad_handler_spec",
}
globals().update(reused_tests(source, SKIP))
group = source.group


@pytest.fixture
def client(cluster_url: str) -> Iterator[RedisCluster]:
    nodes = [ClusterNode(h, p) for h, p in RedisSettings.from_url(cluster_url).all_addresses()]
    sync_client = RedisCluster(startup_nodes=nodes, decode_responses=True)
    try:
        yield sync_client
    finally:
        sync_client.close()
