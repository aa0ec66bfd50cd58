"""The queue tests run twice: on the session redis-server (`single`) and on the session
Redis Cluster (`cluster`), through one parametrized `redis_url` (and the `redis_client`
of the root conftest, which follows it). A test marked `@pytest.mark.single_node(...)`
gets no cluster run; one marked `valkey` a third, on the session valkey-server; a test
that uses no `redis_url` runs once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.backends import CLUSTER, SINGLE, VALKEY, parametrize_backends
from tests.support.worker_records import SyncClient, sync_client

_URL_FIXTURES = {SINGLE: "single_node_url", CLUSTER: "cluster_url", VALKEY: "valkey_url"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc, "redis_backend", (SINGLE, CLUSTER))


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    """`single`, `cluster` or `valkey` (generated above)."""
    backend: str = request.param
    return backend


@pytest.fixture
def redis_url(redis_backend: str, request: pytest.FixtureRequest) -> str:
    """The emptied session server, cluster or valkey-server; each starts on first use."""
    url: str = request.getfixturevalue(_URL_FIXTURES[redis_backend])
    return url


@pytest.fixture
def client(redis_url: str) -> Iterator[SyncClient]:
    """A synchronous raw client of `redis_url`: a cluster client on the cluster."""
    yield from sync_client(redis_url)
