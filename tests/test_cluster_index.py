"""The time-ordered per-owner index suite, unchanged, on the real 3-master cluster.

The tests are the ones of tests/test_time_index_store.py (imported, not copied); only
the `harness` fixture differs: its stores and raw client use the cluster URL, so the
record, its owner's bucket and the shared bucket (one hash tag: the agent) are written
by one script on one slot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from platform_common.jobs.connection import RedisSettings
from tests import test_time_index_store as source
from tests.support.cluster_reuse import reused_tests
from tests.support.stores import Harness

globals().update(reused_tests(source))
store = source.store


@pytest.fixture
async def harness(cluster_url: str) -> AsyncIterator[Harness]:
    raw: Any = RedisSettings.from_url(cluster_url).make_client()
    harness = Harness("redis", redis_url=cluster_url, raw=raw)
    try:
        yield harness
    finally:
        await harness.aclose()
