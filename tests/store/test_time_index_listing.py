"""The time-ordered per-owner index, on memory, a Redis server and a Redis Cluster alike
(on a cluster the record, its owner's bucket and the shared bucket share the agent's hash
tag: one script writes them on one slot)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from platform_common.jobs import (
    InMemoryJobStore,
    InvalidCursor,
    JobConflict,
    JobStatus,
    ValidationError,
)
from platform_common.jobs.store.contract import BaseJobStore
from platform_common.jobs.store.telemetry import FALLBACK_COUNTER
from platform_common.jobs.store.time_index import job_id_of
from tests.support.stores import Harness

pytestmark = pytest.mark.store(time_index=True)

SHARED = "__shared__"


async def walk(
    store: BaseJobStore, owner: str, limit: int, first_page: asyncio.Event | None = None, **kw: Any
) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = await store.list_for_owner(owner, limit=limit, cursor=cursor, **kw)
        assert len(page.rows) <= limit
        ids += [r.job_id for r in page.rows]
        if first_page is not None:
            first_page.set()
        await asyncio.sleep(0)  # a request boundary: let other tasks run between pages
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


async def test_create_writes_the_entry_only_with_the_flag(harness: Harness) -> None:
    on, off = harness.make(time_index=True), harness.make(time_index=False)
    await on.create("with-index", ttl_seconds=60, owner_oid="u1")
    await off.create("without-index", ttl_seconds=60, owner_oid="u1")
    entries = await harness.index(on, "u1")
    if harness.kind == "memory":  # two memory stores are two stores
        entries += await harness.index(off, "u1")
    assert [job_id_of(m) for m in entries] == ["with-index"]


async def test_a_status_update_does_not_move_the_entry(
    harness: Harness, store: BaseJobStore
) -> None:
    await store.create("j", ttl_seconds=60, owner_oid="u1")
    before = await harness.index(store, "u1")
    await harness.pass_time(0.01)
    await store.update("j", status=JobStatus.RUNNING, result={"x": 1}, ttl_seconds=90)
    await store.update("j", status=JobStatus.SUCCEEDED)
    assert await harness.index(store, "u1") == before
    page = await store.list_for_owner("u1")
    assert [(r.job_id, r.status) for r in page.rows] == [("j", JobStatus.SUCCEEDED)]


async def test_delete_is_the_soft_delete_and_removes_the_entry(
    harness: Harness, store: BaseJobStore
) -> None:
    await store.create("keep", ttl_seconds=60, owner_oid="u1")
    await store.create("gone", ttl_seconds=60, owner_oid="u1")
    await store.create("shared-gone", ttl_seconds=60)
    assert await store.delete("gone") and await store.delete("shared-gone")
    assert [job_id_of(m) for m in await harness.index(store, "u1")] == ["keep"]
    assert await harness.index(store, SHARED) == []
    assert [r.job_id for r in (await store.list_for_owner("u1")).rows] == ["keep"]


async def test_re_creating_an_id_keeps_one_entry(harness: Harness, store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=60, owner_oid="u1")
    with pytest.raises(JobConflict):
        await store.create("j", ttl_seconds=60, owner_oid="u1")
    with pytest.raises(JobConflict):
        await store.create("j", ttl_seconds=60, owner_oid="u2")
    assert len(await harness.index(store, "u1")) == 1
    assert await harness.index(store, "u2") == []
    await store.delete("j")
    await harness.pass_time(0.01)
    await store.create("j", ttl_seconds=60, owner_oid="u2")
    assert await harness.index(store, "u1") == []
    assert len(await harness.index(store, "u2")) == 1
    assert (await store.backfill_time_index()).added == 0


async def test_owner_sees_own_and_shared_jobs_newest_first(
    harness: Harness, store: BaseJobStore
) -> None:
    for job_id, owner in [("a", "u1"), ("b", ""), ("c", "u2"), ("d", "u1"), ("e", ""), ("f", "u2")]:
        await store.create(job_id, {"id": job_id}, ttl_seconds=60, owner_oid=owner)
        await harness.pass_time(0.002)
    assert await walk(store, "u1", 10) == ["e", "d", "b", "a"]
    assert await walk(store, "u2", 10) == ["f", "e", "c", "b"]
    assert await walk(store, "", 10) == ["e", "b"]
    assert await walk(store, "u3", 10) == ["e", "b"]
    assert await walk(store, "u1", 1) == ["e", "d", "b", "a"]


async def test_rows_leave_out_the_payload_unless_asked(store: BaseJobStore) -> None:
    await store.create("j", {"big": "x" * 1000}, ttl_seconds=60, owner_oid="u1")
    (row,) = (await store.list_for_owner("u1")).rows
    assert row.payload is None and row.version == 1 and row.owner_oid == "u1"
    (full,) = (await store.list_for_owner("u1", include_payload=True)).rows
    assert full == await store.get("j")


@pytest.mark.parametrize("limit", [1, 7, 100, 1000])
async def test_walking_every_page_yields_every_job_exactly_once(
    harness: Harness, store: BaseJobStore, limit: int
) -> None:
    owners = ["u1", "u2", ""]
    jobs = [(f"job-{n:05d}", owners[n % 3]) for n in range(3000)]
    await harness.seed_same_time(store, jobs, timestamps=10)  # ~300 jobs per timestamp
    expected = {job_id for job_id, owner in jobs if owner in ("u1", "")}
    inserted: list[str] = []
    walking = True
    # A job created before the first page is read belongs on that page; the promise
    # is about jobs created *while* paging, so inserts start once the walk has begun.
    walk_begun = asyncio.Event()

    async def insert_while_walking() -> None:
        await walk_begun.wait()
        n = 0
        while walking:
            for owner in ("u1", ""):
                await store.create(f"new-{n}", ttl_seconds=60, owner_oid=owner)
                inserted.append(f"new-{n}")
                n += 1
                harness.clock.advance(0.001)  # memory's frozen clock moves on (Redis: real time)
            await asyncio.sleep(0)

    inserter = asyncio.create_task(insert_while_walking())
    try:
        walked = await walk(store, "u1", limit, first_page=walk_begun)
    finally:
        walking = False
        walk_begun.set()
        await inserter
    assert len(walked) == len(set(walked)), "a job appeared twice"
    assert set(walked) == expected, "gaps or strays"
    assert inserted, "nothing was inserted during the walk"
    # ...and the new jobs are on a fresh first page, newest first.
    newest = inserted[::-1][:1000]
    first = await store.list_for_owner("u1", limit=len(newest))
    assert [r.job_id for r in first.rows] == newest


async def test_expired_records_are_skipped_and_their_entries_repaired(
    harness: Harness, store: BaseJobStore
) -> None:
    for n in range(6):
        await store.create(f"short-{n}", ttl_seconds=1, owner_oid="u1")
        await store.create(f"long-{n}", ttl_seconds=60, owner_oid="u1" if n % 2 else "")
    await harness.pass_time(1.05)
    await harness.wait_gone(store, "short-5", deadline_s=2.0)
    for limit in (1, 2, 20):
        assert await walk(store, "u1", limit) == [f"long-{n}" for n in range(5, -1, -1)]
    left = [job_id_of(m) for m in await harness.index(store, "u1")]
    assert sorted(left) == ["long-1", "long-3", "long-5"]


async def test_dangling_entries_never_reach_a_page_and_are_repaired_lazily(
    harness: Harness, store: BaseJobStore
) -> None:
    for n in range(30):
        await store.create(f"j{n:02d}", ttl_seconds=60, owner_oid="u1")
    for n in range(2, 30):  # 28 of 30 vanish: a page must read on past them
        await harness.drop_record(store, f"j{n:02d}")
    page = await store.list_for_owner("u1", limit=2)
    assert [r.job_id for r in page.rows] == ["j01", "j00"] and page.next_cursor is None
    assert len(await harness.index(store, "u1")) == 2


async def test_a_bounded_sweep_removes_dangling_entries(
    harness: Harness, store: BaseJobStore
) -> None:
    for n in range(10):
        await store.create(f"a{n}", ttl_seconds=60, owner_oid="u1")
        await store.create(f"b{n}", ttl_seconds=60)
    for n in range(0, 10, 2):
        await harness.drop_record(store, f"a{n}")
        await harness.drop_record(store, f"b{n}")
    removed = [await store.sweep_time_index(max_entries=3) for _ in range(8)]
    assert all(r <= 3 for r in removed) and sum(removed) == 10
    entries = await harness.index(store, "u1") + await harness.index(store, SHARED)
    live = sorted(job_id_of(m) for m in entries)
    assert live == sorted(f"{p}{n}" for p in "ab" for n in range(1, 10, 2))
    assert await store.sweep_time_index() == 0


async def test_the_periodic_sweeper_cleans_up_until_cancelled(
    harness: Harness, store: BaseJobStore
) -> None:
    for n in range(6):
        await store.create(f"j{n}", ttl_seconds=60, owner_oid="u1")
    for n in range(4):
        await harness.drop_record(store, f"j{n}")
    sweeper = asyncio.create_task(store.sweep_forever(every_seconds=0.01, max_entries=2))
    deadline = asyncio.get_running_loop().time() + 5
    while len(await harness.index(store, "u1")) > 2:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    sweeper.cancel()
    done, _ = await asyncio.wait({sweeper}, timeout=5)
    assert done, "the sweeper ignored its cancellation"
    assert sweeper.cancelled()
    with pytest.raises(ValidationError):
        await store.sweep_forever(every_seconds=0)


async def test_bad_cursors_and_limits(store: BaseJobStore) -> None:
    for n in range(3):
        await store.create(f"j{n}", ttl_seconds=60, owner_oid="u1")
    cursor = (await store.list_for_owner("u1", limit=1)).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidCursor):
        await store.list_for_owner("u2", cursor=cursor)
    with pytest.raises(InvalidCursor):
        await store.list_for_owner("u1", cursor="not-a-cursor")
    for bad in (0, -1, 1001, True):
        with pytest.raises(ValidationError):
            await store.list_for_owner("u1", limit=bad)
    with pytest.raises(ValidationError):
        await store.list_for_owner("bad owner!")


# -- the flag and the fallback ------------------------------------------------------
def fallback_counts(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    assert data is not None
    counts: dict[str, int] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != FALLBACK_COUNTER:
                    continue
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint) and point.attributes is not None
                    counts[str(point.attributes["reason"])] = int(point.value)
    return counts


async def test_flag_off_uses_the_legacy_scan_and_says_so(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    reader = InMemoryMetricReader()
    store = harness.make(time_index=False, meter_provider=MeterProvider(metric_readers=[reader]))
    for n in range(5):
        await store.create(f"j{n}", ttl_seconds=60, owner_oid="u1" if n % 2 else "")
        await harness.pass_time(0.002)
    with caplog.at_level(logging.DEBUG, logger="platform_common.jobs.store.listing"):
        assert await walk(store, "u1", 2) == ["j4", "j3", "j2", "j1", "j0"]
    assert "legacy scan (reason: disabled" in caplog.text
    assert fallback_counts(reader) == {"disabled": 3}


async def test_an_index_that_cannot_be_read_falls_back(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = InMemoryMetricReader()
    store = harness.make(time_index=True, meter_provider=MeterProvider(metric_readers=[reader]))
    for n in range(3):
        await store.create(f"j{n}", ttl_seconds=60, owner_oid="u1")
        await harness.pass_time(0.002)
    if isinstance(store, InMemoryJobStore):

        async def broken(*_: Any) -> list[list[str]]:
            raise RuntimeError("index unreadable")

        monkeypatch.setattr(store, "_index_read", broken)
    else:  # a real failure: the index key holds the wrong type (WRONGTYPE)
        assert harness.raw is not None
        await harness.raw.set(store.keys.index("__shared__"), "not a zset")  # type: ignore[attr-defined]
    with caplog.at_level(logging.INFO, logger="platform_common.jobs.store.listing"):
        assert await walk(store, "u1", 2) == ["j2", "j1", "j0"]
    assert "time index read failed" in caplog.text
    assert fallback_counts(reader) == {"error": 2}


async def test_an_empty_index_falls_back_to_the_scan(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    store = harness.make(time_index=False)
    for n in range(3):
        await store.create(f"old-{n}", ttl_seconds=60, owner_oid="u1")
        await harness.pass_time(0.002)
    store.time_index = True  # flag flipped before any backfill: the index is empty
    with caplog.at_level(logging.INFO, logger="platform_common.jobs.store.listing"):
        page = await store.list_for_owner("u1")
    assert [r.job_id for r in page.rows] == ["old-2", "old-1", "old-0"]
    assert "reason: empty" in caplog.text


async def test_writes_on_reads_off_lists_by_the_complete_scan(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # The rollout's middle step: jobs of before the index (no entries) and jobs created
    # since writes were turned on (entries) are listed together, by the scan.
    reader = InMemoryMetricReader()
    store = harness.make(meter_provider=MeterProvider(metric_readers=[reader]))
    for n in range(3):
        await store.create(f"old-{n}", ttl_seconds=60, owner_oid="u1")
        await harness.pass_time(0.002)
    store.index_writes = True
    await store.create("new-0", ttl_seconds=60, owner_oid="u1")
    assert [job_id_of(m) for m in await harness.index(store, "u1")] == ["new-0"]
    expected = ["new-0", "old-2", "old-1", "old-0"]
    with caplog.at_level(logging.DEBUG, logger="platform_common.jobs.store.listing"):
        assert await walk(store, "u1", 10) == expected
    assert "legacy scan (reason: disabled" in caplog.text
    assert fallback_counts(reader) == {"disabled": 1}
    # What reads on at this point would answer: the index holds the new job only.
    store.index_reads = True
    assert await walk(store, "u1", 10) == ["new-0"]
    await store.backfill_time_index()
    assert await walk(store, "u1", 10) == expected


def test_index_reads_need_index_writes(harness: Harness) -> None:
    with pytest.raises(ValidationError, match="index_reads: needs index_writes"):
        harness.make(index_reads=True)
    both = harness.make(index_writes=True, index_reads=True)
    assert both.time_index
    both.time_index = False  # the former single switch sets both
    assert (both.index_writes, both.index_reads) == (False, False)


async def test_the_legacy_scan_is_bounded_by_its_cap(harness: Harness) -> None:
    store = harness.make(time_index=False, list_scan_cap=10)
    for n in range(40):
        await store.create(f"j{n:02d}", ttl_seconds=60, owner_oid="u1")
    rows = await walk(store, "u1", 100)
    assert 0 < len(rows) <= 10  # the cap bounds the work (and, as in production, the answer)
    full = harness.make(time_index=False)
    if harness.kind == "redis":
        assert len(await walk(full, "u1", 100)) == 40


async def test_legacy_and_index_pages_agree(harness: Harness) -> None:
    indexed = harness.make(time_index=True)
    for n in range(25):
        await indexed.create(f"j{n:02d}", ttl_seconds=60, owner_oid=["u1", "", "u2"][n % 3])
        await harness.pass_time(0.001)
    if harness.kind == "memory":
        legacy: BaseJobStore = indexed
        indexed_walk = await walk(indexed, "u1", 4)
        indexed.time_index = False
        assert await walk(legacy, "u1", 4) == indexed_walk
    else:
        legacy = harness.make(time_index=False)
        assert await walk(legacy, "u1", 4) == await walk(indexed, "u1", 4)
    # A cursor is a position, valid on either path.
    first = await legacy.list_for_owner("u1", limit=3)
    indexed.time_index = True
    rest = await indexed.list_for_owner("u1", limit=100, cursor=first.next_cursor)
    assert len(first.rows) + len(rest.rows) == 17
