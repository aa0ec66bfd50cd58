"""The one pool policy, against real Redis: a full pool waits instead of failing, and a
pool that stays full says "busy" (BackendBusy), never "unreachable"."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI, Header

from platform_common.jobs import BackendBusy, BackendUnavailable, RedisJobStore, make_job_store
from platform_common.jobs.redis.url import RedisSettings
from platform_common.jobs.store.http import jobs_router
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings

CONCURRENT = 200


async def hold_connections(client: object, count: int) -> list[asyncio.Task[object]]:
    """Tasks that each keep one pooled connection busy with a blocking pop on its own
    key, until `release_connections` pushes to those keys: no timing decides the test."""
    tasks = [
        asyncio.create_task(client.execute_command("BLPOP", f"{{held}}:{n}", 0))  # type: ignore[attr-defined]
        for n in range(count)
    ]
    await asyncio.sleep(0)  # let them check their connections out
    return tasks


async def release_connections(url: str, holders: list[asyncio.Task[object]]) -> None:
    """Wake every holder from another client (the held pool has no connection to spare)."""
    other = RedisSettings.from_url(url).make_client()
    try:
        for n in range(len(holders)):
            await other.execute_command("LPUSH", f"{{held}}:{n}", "go")
        await asyncio.gather(*holders)
    finally:
        await other.aclose()


async def test_200_concurrent_gets_on_the_default_pool_all_succeed(redis_url: str) -> None:
    store = make_job_store(redis_url, agent="pool-test")
    try:
        await store.create("job-1", {"n": 1}, ttl_seconds=60)
        records = await asyncio.gather(*(store.get("job-1") for _ in range(CONCURRENT)))
        assert [r.job_id if r else None for r in records] == ["job-1"] * CONCURRENT
    finally:
        await store.close()


async def test_a_pool_that_stays_full_raises_backend_busy_not_unreachable(redis_url: str) -> None:
    settings = RedisSettings.from_url(redis_url + "?max_connections=1&pool_timeout=0.2")
    client = settings.make_client()
    store = RedisJobStore(settings, agent="pool-test", client=client)
    try:
        await store.create("job-1", {"n": 1}, ttl_seconds=60)
        holders = await hold_connections(client, 1)
        with pytest.raises(BackendBusy) as caught:
            await store.get("job-1")
        assert isinstance(caught.value, BackendUnavailable)  # callers that retry still do
        message = str(caught.value)
        assert "in use" in message and "unreachable" not in message
        await release_connections(redis_url, holders)
        record = await store.get("job-1")  # the pool serves again once released
        assert record is not None and record.job_id == "job-1"
    finally:
        await store.close()
        await client.aclose()


async def test_a_waiting_caller_gets_the_released_connection(redis_url: str) -> None:
    settings = RedisSettings.from_url(redis_url + "?max_connections=2&pool_timeout=5")
    client = settings.make_client()
    try:
        holders = await hold_connections(client, 2)
        # Both connections are busy: these wait for them rather than fail.
        pings = [asyncio.create_task(client.execute_command("PING")) for _ in range(20)]
        await asyncio.sleep(0)
        assert not any(ping.done() for ping in pings)
        await release_connections(redis_url, holders)
        assert all(await asyncio.gather(*pings))
        assert len(client.connection_pool._in_use_connections) == 0  # type: ignore[union-attr]
    finally:
        await client.aclose()


def owner_from_header(x_owner: str = Header(default="")) -> str:
    return x_owner


async def test_an_agent_app_answers_200_concurrent_gets(redis_url: str) -> None:
    store = make_job_store(redis_url, agent="pool-test")
    app = FastAPI()
    app.include_router(jobs_router(store, owner_from_header))
    try:
        await store.create("job-1", {"n": 1}, ttl_seconds=60, owner_oid="alice")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as http:
            responses = await asyncio.gather(
                *(http.get("/jobs/job-1", headers={"x-owner": "alice"}) for _ in range(CONCURRENT))
            )
        assert [r.status_code for r in responses] == [200] * CONCURRENT
    finally:
        await store.close()


async def test_parallel_scrapers_each_read_redis(redis_url: str) -> None:
    exporter = Exporter(ExporterSettings.from_args(["--redis-url", redis_url]))
    try:

        async def scraper() -> list[bool]:
            return [(await exporter.scrape()).snapshot is not None for _ in range(40)]

        outcomes = await asyncio.gather(*(scraper() for _ in range(8)))
        assert [all(read) for read in outcomes] == [True] * 8
    finally:
        await exporter.aclose()


async def test_the_cluster_client_waits_then_says_busy(cluster_url: str) -> None:
    # Two clients, so that no timing decides the outcome: 50 callers queue at a gate of
    # two with time to spare (a loaded machine once took over 0.3 s for them), then a
    # gate held until released answers busy after its 0.3 s.
    patient = RedisSettings.from_url(cluster_url + "&max_connections=2&pool_timeout=60")
    hasty = RedisSettings.from_url(cluster_url + "&max_connections=2&pool_timeout=0.3")
    waiting, busy = patient.make_client(), hasty.make_client()
    try:
        replies = await asyncio.gather(*(waiting.execute_command("PING") for _ in range(50)))
        assert all(replies)
        holders = await hold_connections(busy, 2)
        with pytest.raises(BackendBusy):
            await busy.execute_command("GET", "anything")
        await release_connections(cluster_url, holders)
        assert await busy.execute_command("GET", "anything") is None
    finally:
        await waiting.aclose()
        await busy.aclose()
