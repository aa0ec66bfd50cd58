"""The exporter tests' fixtures, one per concept, on the test's Redis (`redis_url`): a raw
synchronous client to seed and read it (`admin`), an Exporter in this process, its HTTP
app through an in-process client, and the exporter as a child process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.exporter_process import ExporterProcess
from tests.support.worker_records import SyncClient, sync_client


@pytest.fixture
def admin(redis_url: str) -> Iterator[SyncClient]:
    yield from sync_client(redis_url)


@pytest.fixture
async def exporter(redis_url: str) -> AsyncIterator[Exporter]:
    instance = Exporter(ExporterSettings.from_args(["--redis-url", redis_url]))
    yield instance
    await instance.aclose()


@pytest.fixture
async def http(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The exporter's app, served in this process (no socket)."""
    app = create_app(ExporterSettings.from_args(["--redis-url", redis_url]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as client:
        yield client
    await app.state.exporter.aclose()


@pytest.fixture
def exporter_process(redis_url: str) -> Iterator[ExporterProcess]:
    """The exporter as a user runs it, for the types `dining` and `flights`."""
    process = ExporterProcess("--redis-url", redis_url, "--agent-types", "dining,flights")
    try:
        yield process
    finally:
        process.stop()
