"""The queue's in-process Worker tests (success, retries, dead letters, TTL, fencing,
renewal), unchanged, on the real 3-master cluster.

The tests are imported from tests/test_queue_worker.py; only `redis_url` (and the raw
`redis_client`) now point at the session cluster.
"""

from __future__ import annotations

from tests import test_queue_worker as source
from tests.support.cluster_reuse import redis_client, redis_url, reused_tests  # noqa: F401

SKIP: set[str] = set()
globals().update(reused_tests(source, SKIP))
queue = source.queue
