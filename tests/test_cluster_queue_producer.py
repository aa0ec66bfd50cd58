"""The queue's producer tests (enqueue, enqueue_many, invalid input, pool), unchanged,
on the real 3-master cluster.

The tests are imported from tests/test_queue_producer.py; only `redis_url` (and the raw
`redis_client`) now point at the session cluster.
"""

from __future__ import annotations

from tests import test_queue_producer as source
from tests.support.cluster_reuse import redis_client, redis_url, reused_tests  # noqa: F401

# The first needs a server that is not there (no cluster involved); the second counts
# CLIENT LIST of one server, while a cluster client pre-warms across nodes.
SKIP = {
    "test_ping_reports_false_when_redis_is_unreachable",
    "test_pool_is_prewarmed_and_ping_answers",
}
globals().update(reused_tests(source, SKIP))
queue = source.queue
