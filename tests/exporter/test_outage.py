"""Redis down, hanging, and back: the scrape answers, says up 0, shows no stale numbers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis

from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.exporter_data import of, parse, seed_type
from tests.support.redis_server import RedisServer


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    # A server of its own: this test stops and restarts it.
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
async def http(own_redis: RedisServer) -> AsyncIterator[httpx.AsyncClient]:
    settings = ExporterSettings.from_args(["--redis-url", own_redis.url, "--redis-timeout", "1"])
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as client:
        yield client
    await app.state.exporter.aclose()


def seed(server: RedisServer, depth: int) -> None:
    admin = redis.Redis(port=server.port, decode_responses=True)
    try:
        seed_type(admin, "dining", waiting=depth, stats={"enqueued": depth})
    finally:
        admin.close()


async def test_redis_down_then_back(own_redis: RedisServer, http: httpx.AsyncClient) -> None:
    seed(own_redis, 4)
    before = parse((await http.get("/metrics")).text)
    assert of(before, "queue_depth", agent_type="dining") == 4
    assert of(before, "queue_exporter_redis_up") == 1

    own_redis.kill()
    down = await http.get("/metrics")
    assert down.status_code == 200  # Prometheus must still get an answer
    samples = parse(down.text)
    assert of(samples, "queue_exporter_redis_up") == 0
    # Nothing read earlier is presented as current.
    assert not [name for name, _ in samples if not name.startswith("queue_exporter_")]
    # Redis down is a metric and an alert, never a reason to leave the Service: still
    # ready (the body says what Redis did) and alive (no restart).
    ready = await http.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "redis": "unreachable"})
    assert (await http.get("/healthz")).status_code == 200

    own_redis.start()  # same port, empty (no persistence): new numbers
    seed(own_redis, 9)
    after = parse((await http.get("/metrics")).text)  # the very next scrape is right
    assert of(after, "queue_exporter_redis_up") == 1
    assert of(after, "queue_depth", agent_type="dining") == 9
    assert of(after, "jobs_enqueued_total", agent_type="dining") == 9
    assert (await http.get("/readyz")).json() == {"status": "ready", "redis": "reachable"}


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (kernel backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


async def test_a_hanging_redis_is_cut_off_by_the_timeout(silent_port: int) -> None:
    settings = ExporterSettings.from_args(
        ["--redis-url", f"redis://127.0.0.1:{silent_port}/0", "--redis-timeout", "0.3"]
    )
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as client:
            # The server never replies: only the exporter's own timeout can end these.
            metrics = await asyncio.wait_for(client.get("/metrics"), timeout=30)
            ready = await asyncio.wait_for(client.get("/readyz"), timeout=30)
    finally:
        await app.state.exporter.aclose()
    samples = parse(metrics.text)
    assert of(samples, "queue_exporter_redis_up") == 0
    duration = of(samples, "queue_exporter_scrape_duration_seconds")
    assert duration is not None and duration >= 0.2  # it waited for the timeout, then stopped
    assert (ready.status_code, ready.json()["redis"]) == (200, "unreachable")
