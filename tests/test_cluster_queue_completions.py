"""The queue's completion-event tests, unchanged, on the real 3-master cluster.

The tests are imported from tests/test_queue_completions.py; only `redis_url` (and the raw
`redis_client`) now point at the session cluster.
"""

from __future__ import annotations

from tests import test_queue_completions as source
from tests.support.cluster_reuse import redis_client, redis_url, reused_tests  # noqa: F401

# These probe one server directly (redis-cli CLIENT KILL, PUBSUB NUMPAT, which a cluster
# client does not offer); completions across a cluster failover are in
# test_cluster_failover.py.
SKIP = {
    "test_completions_across_a_killed_subscriber_connection",
    "test_every_job_mode_yields_unwatched_events",
}
globals().update(reused_tests(source, SKIP))
queue = source.queue
