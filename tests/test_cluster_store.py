"""The JobStore contract suite, unchanged, against a real 3-master Redis Cluster.

The tests are the ones of tests/test_store_contract.py (imported, not copied); only
the `harness` fixture differs: its stores and its raw client use the cluster URL.
"""

from __future__ import annotations

from tests import test_store_contract as contract
from tests.support import cluster_reuse
from tests.support.stores import Harness

# Every contract test (and the `store` fixture they share) runs here too.
globals().update(cluster_reuse.reused_tests(contract))
store = contract.store
harness = cluster_reuse.harness


async def test_contract_runs_on_the_cluster(harness: Harness) -> None:
    # Guard against a silent fallback to a single node: the raw client is a cluster
    # client and the store's keys live on the slot of the agent's hash tag.
    made = harness.make()
    await made.create("probe", ttl_seconds=60)
    assert await harness.raw.exists(made.keys.record("probe")) == 1  # type: ignore[union-attr]
    assert len(harness.raw.get_primaries()) == 3  # type: ignore[union-attr]
