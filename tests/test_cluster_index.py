"""The time-ordered per-owner index suite, unchanged, on the real 3-master cluster.

The tests are the ones of tests/test_time_index_store.py (imported, not copied); only
the `harness` fixture differs: its stores and raw client use the cluster URL, so the
record, its owner's bucket and the shared bucket (one hash tag: the agent) are written
by one script on one slot.
"""

from __future__ import annotations

from tests import test_time_index_store as source
from tests.support import cluster_reuse

globals().update(cluster_reuse.reused_tests(source))
store = source.store
harness = cluster_reuse.harness
