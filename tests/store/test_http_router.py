"""The FastAPI jobs router on every JobStore backend: owners are isolated, limits and
cursors are checked."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI, Header

from platform_common.jobs.store.contract import BaseJobStore
from platform_common.jobs.store.http import jobs_router
from tests.support.redis_server import find_free_port
from tests.support.stores import Harness


def owner_from_header(x_owner: str = Header(default="")) -> str:
    return x_owner  # in an agent: the authenticated user's object id


@pytest.fixture
async def seeded(harness: Harness) -> BaseJobStore:
    store = harness.make(time_index=True)
    for n in range(9):
        await store.create(f"alice-{n}", {"n": n}, ttl_seconds=60, owner_oid="alice")
        await store.create(f"bob-{n}", {"n": n}, ttl_seconds=60, owner_oid="bob")
        await harness.pass_time(0.001)
    for n in range(3):
        await store.create(f"shared-{n}", ttl_seconds=60)
        await harness.pass_time(0.001)
    return store


@pytest.fixture
async def api(seeded: BaseJobStore) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(jobs_router(seeded, owner_from_header, max_limit=50), prefix="/api")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        yield client


def as_(owner: str) -> dict[str, str]:
    return {"x-owner": owner}


async def walk(api: httpx.AsyncClient, owner: str, limit: int) -> list[str]:
    ids: list[str] = []
    params: dict[str, str | int] = {"limit": limit}
    while True:
        response = await api.get("/api/jobs", params=params, headers=as_(owner))
        assert response.status_code == 200, response.text
        body = response.json()
        ids += [job["job_id"] for job in body["jobs"]]
        if body["next_cursor"] is None:
            return ids
        params["cursor"] = body["next_cursor"]


async def test_a_caller_sees_only_their_jobs_and_shared_ones(api: httpx.AsyncClient) -> None:
    alice = await walk(api, "alice", 4)
    assert alice == [f"shared-{n}" for n in (2, 1, 0)] + [f"alice-{n}" for n in range(8, -1, -1)]
    bob = await walk(api, "bob", 50)
    assert not any(job_id.startswith("alice") for job_id in bob) and len(bob) == 12
    assert await walk(api, "", 5) == ["shared-2", "shared-1", "shared-0"]


async def test_rows_carry_no_payload_unless_asked(api: httpx.AsyncClient) -> None:
    plain = (await api.get("/api/jobs?limit=1", headers=as_("bob"))).json()["jobs"][0]
    assert plain["payload"] is None
    full = (await api.get("/api/jobs?limit=4&include_payload=true", headers=as_("bob"))).json()
    assert full["jobs"][3]["payload"] == {"n": 8}


async def test_another_owners_job_is_404_like_a_missing_one(api: httpx.AsyncClient) -> None:
    own = await api.get("/api/jobs/alice-3", headers=as_("alice"))
    assert own.status_code == 200 and own.json()["payload"] == {"n": 3}
    assert (await api.get("/api/jobs/shared-1", headers=as_("bob"))).status_code == 200
    foreign = await api.get("/api/jobs/alice-3", headers=as_("bob"))
    missing = await api.get("/api/jobs/alice-99", headers=as_("bob"))
    invalid = await api.get("/api/jobs/bad%20id", headers=as_("bob"))
    assert foreign.status_code == missing.status_code == invalid.status_code == 404
    assert foreign.json() == missing.json() == {"detail": "job not found"}
    assert (await api.get("/api/jobs/alice-3", headers=as_(""))).status_code == 404


@pytest.mark.parametrize("limit", ["0", "-1", "51", "ten"])
async def test_bad_limits_are_422(api: httpx.AsyncClient, limit: str) -> None:
    response = await api.get(f"/api/jobs?limit={limit}", headers=as_("alice"))
    assert response.status_code == 422
    assert "limit" in response.text


async def test_bad_and_foreign_cursors_are_400(api: httpx.AsyncClient) -> None:
    first = (await api.get("/api/jobs?limit=2", headers=as_("alice"))).json()
    stolen = await api.get("/api/jobs", params={"cursor": first["next_cursor"]}, headers=as_("bob"))
    assert stolen.status_code == 400 and "invalid cursor" in stolen.json()["detail"]
    garbage = await api.get("/api/jobs", params={"cursor": "%%%"}, headers=as_("alice"))
    assert garbage.status_code == 400
    too_long = await api.get("/api/jobs", params={"cursor": "A" * 500}, headers=as_("alice"))
    assert too_long.status_code == 422


async def test_an_invalid_owner_from_the_app_is_refused(api: httpx.AsyncClient) -> None:
    response = await api.get("/api/jobs", headers=as_("not valid!"))
    assert response.status_code == 403


async def test_an_unreachable_store_is_503() -> None:
    from platform_common.jobs import RedisJobStore

    store = RedisJobStore(f"redis://127.0.0.1:{find_free_port()}/0", agent="down", time_index=True)
    app = FastAPI()
    app.include_router(jobs_router(store, owner_from_header))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        assert (await client.get("/jobs/j1", headers=as_("a"))).status_code == 503
        assert (await client.get("/jobs", headers=as_("a"))).status_code == 503
    await store.close()
