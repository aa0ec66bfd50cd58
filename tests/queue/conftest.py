"""The queue tests run twice: on the session redis-server (`single`) and on the session
Redis Cluster (`cluster`), through one parametrized `redis_url` (and the `redis_client`
of the root conftest, which follows it). A test marked `@pytest.mark.single_node(...)`
gets no cluster run; one marked `valkey` a third, on the session valkey-server; a test
that uses no `redis_url` runs once.

One fixture per thing a test works with: `queue` (a producer), `env` (the queue with a
worker's calls and raw clients), `keyspace` (a raw client that does not decode), `client`
(a synchronous raw client), `exporter` and `provider` (an OpenTelemetry SDK in memory).
How `queue` is made is the closest `@pytest.mark.queue(...)`'s say (a test's, else its
module's `pytestmark`):

    pytestmark = pytest.mark.queue(max_attempts=2)        # fast_settings(url, max_attempts=2)
    @pytest.mark.queue(defaults=True, max_payload_bytes=4096)  # the package's defaults
    @pytest.mark.queue(register=("dining",))              # the type registered before the test
    @pytest.mark.queue(traced=True)                       # reporting to `provider`

A module that needs a server of its own overrides `redis_url` (the clients follow it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs.redis.url import RedisClient, RedisSettings
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.support.backends import CLUSTER, SINGLE, VALKEY, parametrize_backends
from tests.support.queue_env import QueueEnv
from tests.support.queue_runtime import fast_settings
from tests.support.worker_records import SyncClient, sync_client

QUEUE_MARKER = "queue"
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


@pytest.fixture
async def keyspace(redis_url: str) -> AsyncIterator[RedisClient]:
    """A raw client of `redis_url` that does not decode (DUMP): bytes in, bytes out."""
    made: RedisClient
    if RedisSettings.from_url(redis_url).cluster:
        made = RedisSettings.from_url(redis_url).make_client(decode_responses=False)
    else:
        made = aioredis.Redis.from_url(redis_url)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """Where `provider` puts the finished spans."""
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """An OpenTelemetry SDK tracer provider exporting to `exporter` as each span ends."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider
    tracer_provider.shutdown()


def queue_marker(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker(QUEUE_MARKER)
    return dict(marker.kwargs) if marker is not None else {}


@pytest.fixture
async def queue(redis_url: str, request: pytest.FixtureRequest) -> AsyncIterator[JobQueue]:
    """A producer on `redis_url`, made as the closest `queue` marker says (the module
    doc); closed after the test."""
    options = queue_marker(request)
    register: tuple[str, ...] = tuple(options.pop("register", ()))
    tracer_provider = request.getfixturevalue("provider") if options.pop("traced", False) else None
    settings: QueueSettings
    if options.pop("defaults", False):
        settings = QueueSettings.from_url(redis_url, **options)
    else:
        settings = fast_settings(redis_url, **options)
    async with await JobQueue.connect(settings, tracer_provider=tracer_provider) as job_queue:
        for agent_type in register:
            await job_queue.connection.register_type(agent_type)
        yield job_queue


@pytest.fixture
async def env(
    queue: JobQueue,
    redis_client: RedisClient,
    keyspace: RedisClient,
    request: pytest.FixtureRequest,
) -> QueueEnv:
    """`queue` with a worker's calls for `dining` and both raw clients, as the module's
    `Env` (its QueueEnv subclass, if it has one), prepared as that says."""
    kind: type[QueueEnv] = getattr(request.module, "Env", QueueEnv)
    connection = queue.connection
    made = kind(
        queue,
        AttemptCalls(connection, "dining"),
        Chores(connection, "dining"),
        redis_client,
        keyspace,
    )
    await made.prepare()
    return made
