"""The HTTP surfaces fuzzed from their own OpenAPI schemas (schemathesis): the
exporter's app and the jobs router, both on a real Redis holding real data. No request
may get a 5xx (other than the documented 503 when Redis is unreachable, which it is not
here), and no response may be unbounded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
import redis
import schemathesis
from fastapi import FastAPI, Header
from hypothesis import HealthCheck, settings

from platform_common.jobs import make_job_store
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.store.http import jobs_router
from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.redis_server import RedisServer, find_free_port_below_ephemeral_range

MAX_BODY = 256 * 1024
"""Bytes: far above any legitimate response here (a few types, pages of <= 100 jobs)."""
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# Schemas load at import (schemathesis' lazy loader does not run on this pytest), so the
# apps are built at import on a port chosen now; the module fixture starts Redis there
# before any request. Apps connect lazily, on their first request. The port is below the
# ephemeral range: the connections and servers of the tests run before this module's
# cannot take it meanwhile.
PORT = find_free_port_below_ephemeral_range()
URL = f"redis://127.0.0.1:{PORT}/0"


def _jobs_app() -> FastAPI:
    store = make_job_store(URL, agent="fuzz-agent")
    store.time_index = True

    def owner(x_owner: Annotated[str, Header(max_length=64)] = "") -> str:
        # The caller's identity comes from a header here, so the fuzzer varies it too.
        return x_owner

    app = FastAPI()
    app.include_router(jobs_router(store, owner), prefix="/api")
    return app


EXPORTER_APP = create_app(ExporterSettings.from_args(["--redis-url", URL]))
JOBS_APP = _jobs_app()
exporter_api = schemathesis.openapi.from_asgi("/openapi.json", EXPORTER_APP)
jobs_api = schemathesis.openapi.from_asgi("/openapi.json", JOBS_APP)


@pytest.fixture(scope="module", autouse=True)
def fuzz_redis() -> Iterator[RedisServer]:
    with RedisServer(port=PORT) as server:
        client = redis.Redis(port=server.port, decode_responses=True)
        for agent_type in ("dining", "flights"):
            keys = QueueKeys(agent_type)
            client.sadd(QueueKeys.types_key(), agent_type)
            client.lpush(keys.queue, "a", "b")
            client.hset(keys.stats, mapping={"enqueued": 5, "completed": 3, "latency_sum": "1.5"})
        client.close()
        asyncio.run(_seed_jobs())
        yield server


async def _seed_jobs() -> None:
    store = make_job_store(URL, agent="fuzz-agent")
    store.time_index = True
    try:
        for number in range(30):
            owner = ("alice", "bob", "")[number % 3]
            await store.create(f"job-{number}", {"n": number}, ttl_seconds=600, owner_oid=owner)
    finally:
        await store.close()


def check(case: Any) -> None:
    response = case.call()
    assert response.status_code < 500, (response.status_code, response.text[:500])
    assert len(response.content) <= MAX_BODY


@exporter_api.parametrize()
@FUZZ
def test_exporter_never_fails_and_stays_bounded(case: Any) -> None:
    check(case)


@jobs_api.parametrize()
@FUZZ
def test_jobs_router_never_fails_and_stays_bounded(case: Any) -> None:
    check(case)


def test_the_fuzzed_apps_really_serve_data() -> None:
    # Guards the fuzz tests above against passing on empty apps.
    metrics = exporter_api["/metrics"]["GET"].Case().call()
    assert metrics.status_code == 200 and 'jobs_enqueued_total{agent_type="dining"} 5.0' in (
        metrics.text
    )
    listed = jobs_api["/api/jobs"]["GET"].Case(query={"limit": 100}, headers={"x-owner": "alice"})
    response = listed.call()
    assert response.status_code == 200
    jobs = response.json()["jobs"]
    assert {job["owner_oid"] for job in jobs} == {"alice", ""} and len(jobs) == 20
