"""RedisJobStore beyond the contract: layout, replicas, scripts, bad data, outages, TLS, cluster."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from platform_common.jobs import (
    BackendUnavailable,
    InvalidRecord,
    JobRecord,
    JobStatus,
    RedisJobStore,
    VersionConflict,
    make_job_store,
)
from platform_common.jobs.redis.url import RedisSettings
from platform_common.jobs.store import redis_store as redis_store_module
from platform_common.jobs.store.redis_index import INDEX_SKIP_LOG_INTERVAL, IndexSkipLog
from tests.support.redis_server import RedisServer, find_free_port
from tests.support.stores import FakeClock

AGENT = "redis-agent"


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisJobStore]:
    s = RedisJobStore(redis_url, agent=AGENT)
    yield s
    await s.close()


async def test_record_layout_is_the_documented_hash(
    store: RedisJobStore, redis_client: aioredis.Redis
) -> None:
    await store.create("scan-1", {"request": {"repo": "x"}}, ttl_seconds=3600, owner_oid="u1")
    key = "agentjobs:{redis-agent}:scan-1"
    assert await redis_client.keys("*") == [key]
    fields = await redis_client.hgetall(key)
    assert set(fields) == {"status", "payload", "created_at", "updated_at", "version", "owner_oid"}
    assert fields["status"] == "pending" and fields["version"] == "1"
    assert fields["payload"] == '{"request":{"repo":"x"}}'
    assert re.fullmatch(r"\d{10}\.\d{6}", fields["created_at"])
    assert 3599 <= await redis_client.ttl(key) <= 3600
    await store.update("scan-1", status=JobStatus.FAILED, result={"n": 1}, error="boom")
    fields = await redis_client.hgetall(key)
    assert (fields["result"], fields["error"], fields["version"]) == ('{"n":1}', "boom", "2")


async def test_two_replicas_see_each_others_writes(redis_url: str) -> None:
    settings = RedisSettings.from_url(redis_url)
    client_a, client_b = settings.make_client(), settings.make_client()  # two pools, like two pods
    a = RedisJobStore(settings, agent=AGENT, client=client_a)
    b = RedisJobStore(settings, agent=AGENT, client=client_b)
    try:
        await a.create("job", {"from": "a"}, ttl_seconds=60)
        assert (await b.get("job")).payload == {"from": "a"}  # type: ignore[union-attr]
        await b.update("job", status=JobStatus.RUNNING)
        assert (await a.get("job")).status is JobStatus.RUNNING  # type: ignore[union-attr]
        outcomes = await asyncio.gather(
            *(
                replica.update("job", result={"by": n}, expected_version=2)
                for n, replica in enumerate([a, b] * 10)
            ),
            return_exceptions=True,
        )
        winners = [o for o in outcomes if isinstance(o, JobRecord)]
        assert len(winners) == 1
        assert sum(isinstance(o, VersionConflict) for o in outcomes) == 19
        assert await a.get("job") == await b.get("job") == winners[0]
    finally:
        await client_a.aclose()
        await client_b.aclose()


async def test_stores_of_one_agent_share_jobs_other_agents_do_not(redis_url: str) -> None:
    a1, a2 = RedisJobStore(redis_url, agent=AGENT), RedisJobStore(redis_url, agent=AGENT)
    other = RedisJobStore(redis_url, agent="other-agent")
    await a1.create("same-id", {"from": "a1"}, ttl_seconds=60)
    assert (await a2.get("same-id")).payload == {"from": "a1"}  # type: ignore[union-attr]
    assert await other.get("same-id") is None
    await other.create("same-id", {"from": "other"}, ttl_seconds=60)
    assert await a1.list_ids() == ["same-id"]
    assert (await a1.get("same-id")).payload == {"from": "a1"}  # type: ignore[union-attr]
    for store in (a1, a2, other):
        await store.close()


async def test_scripts_survive_script_flush(
    store: RedisJobStore, redis_client: aioredis.Redis
) -> None:
    await store.create("before", ttl_seconds=60)
    await redis_client.script_flush()
    await store.create("after", ttl_seconds=60)
    await redis_client.script_flush()
    assert (await store.update("after", status=JobStatus.RUNNING)).version == 2
    await redis_client.script_flush()
    assert await store.delete("before") is True


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"payload": "{not json"}, "payload"),
        ({"status": "done"}, "status"),
        ({"version": "two"}, "version"),
        ({"created_at": "yesterday"}, "created_at"),
    ],
)
async def test_a_malformed_hash_is_reported_not_half_read(
    store: RedisJobStore, redis_client: aioredis.Redis, fields: dict[str, str], bad_field: str
) -> None:
    await store.create("j", {"a": 1}, ttl_seconds=60)
    await redis_client.hset(store.keys.record("j"), mapping=fields)
    with pytest.raises(InvalidRecord) as info:
        await store.get("j")
    assert info.value.field == bad_field


async def test_a_field_this_version_does_not_know_is_read_past(
    store: RedisJobStore, redis_client: aioredis.Redis
) -> None:
    """A newer version (rolling deploy) may add a field: older readers still read the
    record, and its field survives their updates (tests/store/test_fault_injection.py)."""
    created = await store.create("j", {"a": 1}, ttl_seconds=60)
    await redis_client.hset(store.keys.record("j"), mapping={"surprise": "1"})
    assert await store.get("j") == created


async def test_update_of_a_malformed_hash_writes_nothing(
    store: RedisJobStore, redis_client: aioredis.Redis
) -> None:
    key = store.keys.record("j")
    stamp = "1700000000.000000"
    await redis_client.hset(key, mapping={"status": "pending", "version": "x", "payload": "null",
                                          "created_at": stamp, "updated_at": stamp})  # fmt: skip
    with pytest.raises(InvalidRecord) as info:
        await store.update("j", status=JobStatus.RUNNING)
    assert info.value.field == "version"
    await redis_client.hset(key, mapping={"status": "weird", "version": "1"})
    with pytest.raises(InvalidRecord):
        await store.update("j", status=JobStatus.RUNNING)
    assert await redis_client.hget(key, "version") == "1"


async def test_an_update_that_keeps_losing_its_race_gives_up_writing_nothing(
    store: RedisJobStore, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update the script leaves to Python (a payload deeper than the script judges)
    writes only to the version it read; a writer that bumps the version between every
    read and write makes it retry, then give up with its fields unwritten."""
    await store.create("j", {"a": 1}, ttl_seconds=60)
    key = store.keys.record("j")
    await redis_client.hset(key, "payload", '{"a":' * 65 + "1" + "}" * 65)
    read = store._read_hash

    async def read_then_lose(job_id: str) -> dict[str, str]:
        fields = await read(job_id)
        await redis_client.hincrby(key, "version", 1)
        return fields

    monkeypatch.setattr(redis_store_module, "_UPDATE_ATTEMPTS", 3)
    monkeypatch.setattr(store, "_read_hash", read_then_lose)
    with pytest.raises(BackendUnavailable, match="lost 3 races"):
        await store.update("j", status=JobStatus.RUNNING, result={"r": 1})
    fields = await redis_client.hgetall(key)
    assert (fields["status"], fields["version"], "result" in fields) == ("pending", "4", False)


async def test_an_unreachable_redis_is_backend_unavailable() -> None:
    store = RedisJobStore(f"redis://127.0.0.1:{find_free_port()}/0", agent=AGENT)
    try:
        with pytest.raises(BackendUnavailable, match="unreachable"):
            await store.ping()
        with pytest.raises(BackendUnavailable):
            await store.create("j", ttl_seconds=5)
        with pytest.raises(BackendUnavailable):
            await store.get("j")
    finally:
        await store.close()


async def test_the_password_never_appears_in_errors() -> None:
    store = RedisJobStore(f"redis://u:s3cret@127.0.0.1:{find_free_port()}/0", agent=AGENT)
    with pytest.raises(BackendUnavailable) as info:
        await store.get("j")
    assert "s3cret" not in str(info.value) and "s3cret" not in repr(store)
    await store.close()


async def test_stores_share_one_pool_per_url_and_the_last_close_releases_it(redis_url: str) -> None:
    first, second = RedisJobStore(redis_url, agent=AGENT), RedisJobStore(redis_url, agent="b")
    await first.ping()
    await second.ping()
    loop = asyncio.get_running_loop()
    shared = redis_store_module._shared[loop]
    assert len(shared) == 1 and next(iter(shared.values())).users == 2
    await first.close()
    assert await second.ping()
    await second.close()
    assert shared == {}
    assert await first.ping()  # a closed store lazily reconnects if used again
    await first.close()


async def test_a_corrupt_time_index_is_logged_once_then_counted_per_interval(
    redis_url: str, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisJobStore(redis_url, agent=AGENT, time_index=True)
    clock = FakeClock(0.0)  # the interval passes when the test says so
    store._index_skip_log = IndexSkipLog(AGENT, clock=clock)
    await redis_client.set(store.keys.index("u1"), "not a sorted set")
    caplog.set_level(logging.WARNING, logger="platform_common.jobs.store.redis_store")

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "time index of agent" in r.getMessage()]

    async def create(numbers: range) -> None:
        for n in numbers:
            await store.create(f"job-{n}", {"n": n}, ttl_seconds=60, owner_oid="u1")

    try:
        await create(range(100))
        [first] = lines()
        assert "bucket 'u1', is not a sorted set: create went on" in first
        assert "more since" not in first
        clock.advance(INDEX_SKIP_LOG_INTERVAL)
        await create(range(100, 101))
        assert len(lines()) == 2 and lines()[1].endswith("(99 more since the last report)")
        await create(range(101, 106))  # within the interval: counted, not logged
        assert len(lines()) == 2
    finally:
        await store.close()
    assert len(lines()) == 3 and ": 5 more creates or deletes went on" in lines()[2]
    assert len(await redis_client.keys("agentjobs:{redis-agent}:job-*")) == 106  # none lost


async def test_list_ids_never_returns_index_keys(redis_url: str) -> None:
    store = RedisJobStore(redis_url, agent=AGENT, time_index=True)
    try:
        await store.create("a", ttl_seconds=60, owner_oid="u1")
        await store.create("b", ttl_seconds=60)
        assert sorted(await store.list_ids()) == ["a", "b"]
    finally:
        await store.close()


async def test_records_really_expire_in_redis(store: RedisJobStore) -> None:
    await store.create("one-second", ttl_seconds=1)
    deadline = asyncio.get_running_loop().time() + 3
    while await store.exists("one-second"):
        assert asyncio.get_running_loop().time() < deadline, "not expired within 3 s"
        await asyncio.sleep(0.05)


# -- TLS and cluster --------------------------------------------------------------
@pytest.fixture(scope="module")
def tls_server() -> Iterator[RedisServer]:
    with RedisServer(tls=True) as server:
        yield server


async def test_rediss_url_works_end_to_end(tls_server: RedisServer) -> None:
    store = make_job_store(tls_server.url, agent="tls-agent")
    try:
        assert isinstance(store, RedisJobStore) and store.settings.tls
        await store.create("secure", {"x": 1}, ttl_seconds=60)
        assert (await store.get("secure")).payload == {"x": 1}  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_every_verb_and_the_index_work_on_redis_cluster(cluster_url: str) -> None:
    store = make_job_store(cluster_url, agent="cluster-agent")
    store.time_index = True
    try:
        for n in range(5):
            await store.create(f"job-{n}", {"n": n}, ttl_seconds=60, owner_oid="u1")
        await store.update("job-3", status=JobStatus.RUNNING)
        page = await store.list_for_owner("u1", limit=3)
        assert [r.job_id for r in page.rows] == ["job-4", "job-3", "job-2"]
        assert page.rows[1].status is JobStatus.RUNNING
        assert await store.delete("job-4")
        assert sorted(await store.list_ids()) == [f"job-{n}" for n in range(4)]
        report = await store.backfill_time_index()
        assert (report.scanned, report.present, report.added) == (4, 4, 0)
    finally:
        await store.close()
