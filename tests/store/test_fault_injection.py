"""Fault injection for every `store_*.lua`: each key a script touches is planted with the
wrong type or a malformed value, the verb runs, and the outcome is either success with a
consistent state or the package's own error with the whole keyspace unchanged (DUMP and
absolute expiry of every key compared). Redis does not undo a script that fails midway,
so "unchanged" is the proof that every check ran before the first write.

Every case runs on a single Redis server; on the Redis Cluster one case per verb and
mode, the planted type or value rotating (`cluster_sample`, tests/support/backends.py):
what is planted is a key's content or a script argument, alike on either; the cluster
adds one slot for the keys and its client's errors, which one case per verb proves. The
memory backend has no keys: the bounds both backends share are in test_input_bounds.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from platform_common.jobs import (
    InvalidRecord,
    JobConflict,
    JobNotFound,
    JobsError,
    JobStatus,
    RedisJobStore,
)
from platform_common.jobs.redis.script import Script, run_command
from platform_common.jobs.redis.url import RedisClient, RedisSettings
from platform_common.jobs.store.telemetry import INDEX_SKIP_COUNTER
from tests.support.keyspace import Snapshot, changed_keys, snapshot

pytestmark = pytest.mark.cluster_sample(
    planted=("kind", "fault", "fields", "ttl", "version", "refused"), fixture="env"
)

AGENT = "fault-agent"
OWNER = "u1"
JOB = "job-1"


@dataclass
class Env:
    store: RedisJobStore
    raw: RedisClient
    """Decodes replies (for setting up and reading back)."""
    raw_bytes: RedisClient
    """Bytes in, bytes out: DUMP, and values that are not UTF-8."""
    metrics: InMemoryMetricReader

    @property
    def record_key(self) -> str:
        return self.store.keys.record(JOB)

    @property
    def index_key(self) -> str:
        return self.store.keys.index(OWNER)

    async def snapshot(self) -> Snapshot:
        return await snapshot(self.raw_bytes)

    async def members(self) -> list[str]:
        members: list[str] = await self.raw.zrange(self.index_key, 0, -1)
        return members

    def index_skips(self) -> dict[str, int]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        points: list[Any] = [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == INDEX_SKIP_COUNTER
            for point in metric.data.data_points
        ]
        return {point.attributes["verb"]: point.value for point in points}


# The whole matrix on valkey-server too: what a second server family can break is
# exactly how its scripts meet a planted key.
@pytest.fixture(params=["redis", "cluster", "valkey"])
async def env(request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    cluster = request.param == "cluster"
    urls = {"redis": "single_node_url", "cluster": "cluster_url", "valkey": "valkey_url"}
    url: str = request.getfixturevalue(urls[request.param])
    raw: RedisClient
    raw_bytes: RedisClient
    if cluster:
        raw = RedisSettings.from_url(url).make_client()
        raw_bytes = RedisSettings.from_url(url).make_client(decode_responses=False)
    else:
        raw = aioredis.Redis.from_url(url, decode_responses=True)
        raw_bytes = aioredis.Redis.from_url(url)
    metrics = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[metrics])
    store = RedisJobStore(url, agent=AGENT, time_index=True, meter_provider=provider)
    try:
        yield Env(store, raw, raw_bytes, metrics)
    finally:
        await store.close()
        await raw.aclose()
        await raw_bytes.aclose()
        provider.shutdown()


# -- the faults --------------------------------------------------------------------------
# A command that makes a key of each type (KEY is replaced by the key).
WRONG_TYPES: dict[str, tuple[str, ...]] = {
    "string": ("SET", "KEY", "not what the store wrote"),
    "list": ("RPUSH", "KEY", "a"),
    "set": ("SADD", "KEY", "a"),
    "zset": ("ZADD", "KEY", "0", "a"),
    "hash": ("HSET", "KEY", "a", "1"),
    "stream": ("XADD", "KEY", "*", "a", "1"),
}
RECORD_WRONG_TYPES = sorted(set(WRONG_TYPES) - {"hash"})
INDEX_WRONG_TYPES = sorted(set(WRONG_TYPES) - {"zset"})

DEEP_JSON = b'{"a":' * 100_000 + b"1" + b"}" * 100_000

# field -> bytes to store (None: the field is removed), and the field the error names.
MALFORMED: dict[str, tuple[dict[str, bytes | None], str]] = {
    "version not a number": ({"version": b"two"}, "version"),
    "version zero": ({"version": b"0"}, "version"),
    "version in exponent notation": ({"version": b"1e3"}, "version"),
    "version missing": ({"version": None}, "version"),
    "status of a newer version": ({"status": b"paused"}, "status"),
    "status missing": ({"status": None}, "status"),
    "created_at garbage": ({"created_at": b"yesterday"}, "created_at"),
    "created_at not finite": ({"created_at": b"1e400"}, "created_at"),
    "created_at missing": ({"created_at": None}, "created_at"),
    "updated_at garbage": ({"updated_at": b"soon"}, "updated_at"),
    "payload not JSON": ({"payload": b"{not json"}, "payload"),
    "payload a JSON array": ({"payload": b"[1,2]"}, "payload"),
    "payload nested 100k deep": ({"payload": DEEP_JSON}, "payload"),
    "payload missing": ({"payload": None}, "payload"),
    "result not JSON": ({"result": b"{oops"}, "result"),
    "error not UTF-8": ({"error": b"\xff\xfe"}, "record"),
    "owner_oid not UTF-8": ({"owner_oid": b"\xc3("}, "record"),
}


async def plant(env: Env, key: str, kind: str) -> None:
    await env.raw.delete(key)
    await env.raw.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))


async def plant_record_type(env: Env, kind: str) -> None:
    await plant(env, env.record_key, kind)


async def plant_index_type(env: Env, kind: str) -> None:
    await plant(env, env.index_key, kind)


async def malform(env: Env, fields: dict[str, bytes | None], job_id: str = JOB) -> None:
    """Overwrite (or remove, for None) fields of a record, bytes as given."""
    key = env.store.keys.record(job_id)
    for name, value in fields.items():
        if value is None:
            await env.raw_bytes.execute_command("HDEL", key, name)
        else:
            await env.raw_bytes.execute_command("HSET", key, name, value)


# -- store_create ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", RECORD_WRONG_TYPES)
async def test_create_over_a_key_of_another_type_conflicts_and_writes_nothing(
    env: Env, kind: str
) -> None:
    await plant_index_type(env, "string")  # an index fault as well: the conflict comes first
    await plant_record_type(env, kind)
    before = await env.snapshot()
    with pytest.raises(JobConflict):
        await env.store.create(JOB, {"a": 1}, ttl_seconds=60, owner_oid=OWNER)
    assert await env.snapshot() == before


@pytest.mark.parametrize("fault", sorted(MALFORMED))
async def test_create_over_a_malformed_record_conflicts_and_writes_nothing(
    env: Env, fault: str
) -> None:
    await env.store.create(JOB, {"a": 1}, ttl_seconds=60, owner_oid=OWNER)
    await malform(env, MALFORMED[fault][0])
    before = await env.snapshot()
    with pytest.raises(JobConflict):
        await env.store.create(JOB, {"b": 2}, ttl_seconds=60, owner_oid=OWNER)
    assert await env.snapshot() == before


@pytest.mark.parametrize("kind", INDEX_WRONG_TYPES)
async def test_create_with_a_corrupt_index_writes_the_record_alone_and_counts_it(
    env: Env, kind: str
) -> None:
    """The decision (store_create.lua): the index is derived data, so a bucket of the
    wrong type costs the entry (counted, and the listing falls back to the scan), never
    the create, and never a record written halfway."""
    await plant_index_type(env, kind)
    before = await env.snapshot()
    record = await env.store.create(JOB, {"a": 1}, ttl_seconds=60, owner_oid=OWNER)
    after = await env.snapshot()
    assert changed_keys(before, after) == {env.record_key.encode()}
    assert await env.store.get(JOB) == record
    assert 0 < await env.raw.ttl(env.record_key) <= 60
    assert env.index_skips() == {"create": 1}
    page = await env.store.list_for_owner(OWNER)
    assert [r.job_id for r in page.rows] == [JOB]


async def test_create_into_an_index_with_foreign_members_adds_its_entry(env: Env) -> None:
    await env.raw.zadd(env.index_key, {"not-a-member": 0, "9" * 16 + ":gone": 0})
    record = await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    assert len(await env.members()) == 3
    assert [r.job_id for r in (await env.store.list_for_owner(OWNER)).rows] == [JOB]
    assert await env.store.get(JOB) == record
    assert env.index_skips() == {}


@pytest.mark.parametrize("ttl", ["9223372036854775807", "1000000000", "0", "-1", "1e9", "", "x"])
async def test_the_create_script_refuses_a_ttl_before_writing(env: Env, ttl: str) -> None:
    """Past the store's validation a bad TTL cannot reach the script; the script still
    refuses it before its first write rather than trust its caller."""
    before = await env.snapshot()
    call = Script.named("store_create").call(
        [env.record_key, env.index_key], ["pending", "null", ttl, OWNER, JOB]
    )
    assert await run_command(env.raw, call) == ["invalid", "ttl_seconds"]
    assert await env.snapshot() == before


# -- store_update ------------------------------------------------------------------------
async def update(env: Env) -> Any:
    return await env.store.update(
        JOB, status=JobStatus.RUNNING, result={"r": 1}, error="e", ttl_seconds=120
    )


@pytest.mark.parametrize("kind", RECORD_WRONG_TYPES)
async def test_update_of_a_key_of_another_type_is_invalid_and_writes_nothing(
    env: Env, kind: str
) -> None:
    await plant_record_type(env, kind)
    before = await env.snapshot()
    with pytest.raises(InvalidRecord) as info:
        await update(env)
    assert info.value.field == "record"
    with pytest.raises(InvalidRecord):
        await env.store.get(JOB)
    assert await env.snapshot() == before


@pytest.mark.parametrize("fault", sorted(MALFORMED))
async def test_update_of_a_malformed_record_is_invalid_and_writes_nothing(
    env: Env, fault: str
) -> None:
    await env.store.create(JOB, {"a": 1}, ttl_seconds=60, owner_oid=OWNER)
    fields, named = MALFORMED[fault]
    await malform(env, fields)
    before = await env.snapshot()
    with pytest.raises(InvalidRecord) as info:
        await update(env)
    assert info.value.field == named
    with pytest.raises(InvalidRecord):
        await env.store.get(JOB)
    assert await env.snapshot() == before


async def test_update_of_a_missing_record_writes_nothing(env: Env) -> None:
    await env.store.create("other", ttl_seconds=60, owner_oid=OWNER)
    before = await env.snapshot()
    with pytest.raises(JobNotFound):
        await update(env)
    assert await env.snapshot() == before


async def test_a_field_of_a_newer_version_survives_an_update(env: Env) -> None:
    """Defect: the update was applied, then parsing its answer raised InvalidRecord."""
    created = await env.store.create(JOB, {"a": 1}, ttl_seconds=60, owner_oid=OWNER)
    await env.raw.hset(env.record_key, "priority", "high")
    expiry = await env.raw.pexpiretime(env.record_key)
    updated = await env.store.update(JOB, status=JobStatus.RUNNING, result={"r": 1})
    assert (updated.status, updated.result, updated.version) == (JobStatus.RUNNING, {"r": 1}, 2)
    assert updated.created_at == created.created_at and updated.payload == {"a": 1}
    assert await env.store.get(JOB) == updated
    assert await env.raw.hget(env.record_key, "priority") == "high"
    assert await env.raw.pexpiretime(env.record_key) == expiry  # the TTL kept, as documented


async def test_a_huge_version_is_bumped_in_integer_digits(env: Env) -> None:
    """Lua numbers are doubles: computed there, 10**23 + 1 would be written "1e+23"."""
    await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    await env.raw.hset(env.record_key, "version", str(10**23 - 1))
    updated = await env.store.update(JOB, status=JobStatus.RUNNING, expected_version=10**23 - 1)
    assert updated.version == 10**23
    assert await env.raw.hget(env.record_key, "version") == str(10**23)
    assert await env.store.get(JOB) == updated


@pytest.mark.parametrize(
    ("version", "ttl", "refused"),
    [
        ("1e+21", "", "version"),
        ("", "", "version"),
        ("3", "9223372036854775807", "ttl_seconds"),
        ("3", "0", "ttl_seconds"),
        ("3", "12.5", "ttl_seconds"),
    ],
)
async def test_the_update_script_refuses_its_arguments_before_writing(
    env: Env, version: str, ttl: str, refused: str
) -> None:
    await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    stored = await env.raw.hmget(env.record_key, ["version", "created_at"])
    before = await env.snapshot()
    call = Script.named("store_update").call(
        [env.record_key], [*stored, version, "running", "", "", "", ttl]
    )
    assert await run_command(env.raw, call) == ["invalid", refused]
    assert await env.snapshot() == before


async def test_the_update_script_writes_only_to_the_version_it_was_given(env: Env) -> None:
    await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    created_at = await env.raw.hget(env.record_key, "created_at")
    before = await env.snapshot()
    for guard in (["2", created_at], ["1", "1700000000.000000"]):
        call = Script.named("store_update").call(
            [env.record_key], [*guard, "9", "running", "", "", "", ""]
        )
        assert await run_command(env.raw, call) == ["moved"]
    assert await env.snapshot() == before


# -- store_delete ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", RECORD_WRONG_TYPES)
async def test_delete_clears_a_key_of_another_type(env: Env, kind: str) -> None:
    """Delete is how a corrupt record is cleared: it removes whatever holds the key."""
    await env.store.create("other", ttl_seconds=60, owner_oid=OWNER)
    await plant_record_type(env, kind)
    before = await env.snapshot()
    assert await env.store.delete(JOB) is True
    assert changed_keys(before, await env.snapshot()) == {env.record_key.encode()}
    assert not await env.raw.exists(env.record_key)


@pytest.mark.parametrize("fault", sorted(MALFORMED))
async def test_delete_clears_a_malformed_record_and_at_most_its_entry(env: Env, fault: str) -> None:
    await env.store.create("other", ttl_seconds=60, owner_oid=OWNER)
    await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    entries = await env.members()
    await malform(env, MALFORMED[fault][0])
    before = await env.snapshot()
    assert await env.store.delete(JOB) is True
    after = await env.snapshot()
    assert not await env.raw.exists(env.record_key)
    assert changed_keys(before, after) <= {env.record_key.encode(), env.index_key.encode()}
    left = await env.members()
    # The entry goes when the record still names it; otherwise it dangles, as after a
    # TTL expiry, and the listing's repair or the sweep removes it.
    assert left in (entries, [m for m in entries if not m.endswith(":" + JOB)])
    assert [r.job_id for r in (await env.store.list_for_owner(OWNER)).rows] == ["other"]


@pytest.mark.parametrize("kind", INDEX_WRONG_TYPES)
async def test_delete_with_a_corrupt_index_removes_the_record_and_counts_it(
    env: Env, kind: str
) -> None:
    await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    await plant_index_type(env, kind)
    before = await env.snapshot()
    assert await env.store.delete(JOB) is True
    assert changed_keys(before, await env.snapshot()) == {env.record_key.encode()}
    assert env.index_skips() == {"delete": 1}
    assert await env.store.get(JOB) is None


# -- store_index_backfill ------------------------------------------------------------------
async def unindexed_record(env: Env) -> None:
    """A record written before the time index was turned on: the backfill's work."""
    env.store.time_index = False
    await env.store.create(JOB, {"a": 1}, ttl_seconds=60, owner_oid=OWNER)
    env.store.time_index = True


@pytest.mark.parametrize("kind", RECORD_WRONG_TYPES)
async def test_backfill_skips_a_key_of_another_type(env: Env, kind: str) -> None:
    await plant_record_type(env, kind)
    before = await env.snapshot()
    report = await env.store.backfill_time_index()
    assert (report.scanned, report.added, report.skipped, report.malformed) == (1, 0, 1, [JOB])
    assert await env.snapshot() == before


@pytest.mark.parametrize(
    "fields",
    [
        {"created_at": b"yesterday"},
        {"created_at": b"12345678901.000000"},  # 11 digits: no 16-digit entry exists
        {"created_at": b"1e9.000000"},
        {"created_at": None},
        {"owner_oid": b"\xc3("},
    ],
    ids=repr,
)
async def test_backfill_reports_a_record_it_cannot_index(
    env: Env, fields: dict[str, bytes | None]
) -> None:
    await unindexed_record(env)
    await malform(env, fields)
    before = await env.snapshot()
    report = await env.store.backfill_time_index()
    assert (report.scanned, report.added, report.skipped, report.malformed) == (1, 0, 1, [JOB])
    assert await env.snapshot() == before


@pytest.mark.parametrize("kind", INDEX_WRONG_TYPES)
async def test_backfill_names_an_index_key_of_another_type(env: Env, kind: str) -> None:
    await unindexed_record(env)
    await plant_index_type(env, kind)
    before = await env.snapshot()
    report = await env.store.backfill_time_index()
    assert (report.scanned, report.added, report.skipped) == (1, 0, 1)
    assert (report.malformed, report.bad_buckets) == ([], [OWNER])
    assert await env.snapshot() == before


async def test_backfill_indexes_a_record_with_a_field_of_a_newer_version(env: Env) -> None:
    await unindexed_record(env)
    await env.raw.hset(env.record_key, "priority", "high")
    report = await env.store.backfill_time_index()
    assert (report.added, report.skipped) == (1, 0)
    assert [m.endswith(":" + JOB) for m in await env.members()] == [True]


# -- store_index_repair ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", INDEX_WRONG_TYPES)
async def test_repair_and_sweep_leave_an_index_key_of_another_type_alone(
    env: Env, kind: str
) -> None:
    await env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER)
    entry = (await env.members())[0]
    await plant_index_type(env, kind)
    before = await env.snapshot()
    assert await env.store.sweep_time_index() == 0
    assert await env.store._index_repair([(OWNER, entry), (OWNER, "0" * 16 + ":gone")]) == 0
    page = await env.store.list_for_owner(OWNER)  # the bucket read fails: the scan serves
    assert [r.job_id for r in page.rows] == [JOB]
    assert await env.snapshot() == before


@pytest.mark.parametrize("verb", ["sweep", "listing"])
async def test_repair_removes_exactly_the_entries_of_unreadable_records(
    env: Env, verb: str
) -> None:
    """Entries whose record is of another type, malformed or gone sit between good
    ones; the repair judges every record before its first removal, so one of another
    type cannot stop it halfway."""
    for job_id in ("a-good", "b-string", "c-garbage", "d-gone", "e-not-utf8", "f-good"):
        await env.store.create(job_id, ttl_seconds=60, owner_oid=OWNER)
    entries = await env.members()
    await plant(env, env.store.keys.record("b-string"), "string")
    await malform(env, {"created_at": b"garbage"}, "c-garbage")
    await env.raw.delete(env.store.keys.record("d-gone"))
    await malform(env, {"error": b"\xff"}, "e-not-utf8")
    before = await env.snapshot()
    if verb == "sweep":
        assert await env.store.sweep_time_index() == 3
    else:
        page = await env.store.list_for_owner(OWNER, limit=10)
        assert [r.job_id for r in page.rows] == ["f-good", "a-good"]
    kept = [m for m in entries if m.split(":", 1)[1] in ("a-good", "e-not-utf8", "f-good")]
    assert await env.members() == kept  # e's record still names its entry: only unreadable
    assert changed_keys(before, await env.snapshot()) == {env.index_key.encode()}


async def test_a_failed_verb_is_never_a_raw_redis_error(env: Env) -> None:
    """Every fault above, once more in one place: what reaches the caller is ours."""
    await plant_record_type(env, "string")
    await plant_index_type(env, "list")
    outcomes: list[BaseException | object] = []
    for call in (
        lambda: env.store.get(JOB),
        lambda: update(env),
        lambda: env.store.create(JOB, ttl_seconds=60, owner_oid=OWNER),
        lambda: env.store.list_for_owner(OWNER),
        lambda: env.store.backfill_time_index(),
        lambda: env.store.sweep_time_index(),
        lambda: env.store.delete(JOB),
    ):
        try:
            outcomes.append(await call())
        except Exception as exc:
            outcomes.append(exc)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(e, JobsError) for e in errors), errors
    assert [type(e) for e in errors] == [InvalidRecord, InvalidRecord, JobConflict]
