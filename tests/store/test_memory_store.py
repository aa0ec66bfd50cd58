"""InMemoryJobStore beyond the contract: bounded memory under expiry, controlled time, tasks."""

from __future__ import annotations

import asyncio

import pytest

from platform_common.jobs import InMemoryJobStore, JobStatus, VersionConflict
from platform_common.jobs import clock as clock_module
from tests.support.stores import FakeClock


async def test_expired_records_never_accumulate() -> None:
    clock = FakeClock()
    store = InMemoryJobStore(now=clock, time_index=True)
    for round_ in range(50):
        for n in range(100):
            await store.create(f"r{round_}-{n}", {"n": n}, ttl_seconds=1, owner_oid="u1")
        clock.advance(2)
    # Every write purges what has expired: at most one round's records are held.
    assert len(store._records) <= 100
    assert len(store._expiry) <= 2 * 100 + 64
    assert sum(len(m) for m in store.debug_index().values()) <= 100


async def test_ttl_resets_do_not_grow_the_expiry_heap() -> None:
    store = InMemoryJobStore(now=FakeClock())
    await store.create("j", ttl_seconds=10)
    for _ in range(1000):
        await store.update("j", ttl_seconds=10)
    assert len(store._expiry) <= 64 + 2


async def test_the_package_clock_is_the_default_time_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeClock()
    monkeypatch.setattr(clock_module, "now", fake)
    store = InMemoryJobStore()
    record = await store.create("j", ttl_seconds=5)
    assert record.created_at == fake.now
    fake.advance(5)
    assert await store.get("j") is None


async def test_concurrent_tasks_see_each_change_whole() -> None:
    store = InMemoryJobStore()
    await store.create("counter", {"n": 0}, ttl_seconds=60)

    async def bump() -> None:
        while True:
            record = await store.get("counter")
            assert record is not None and record.payload is not None
            await asyncio.sleep(0)
            try:
                await store.update(
                    "counter",
                    payload={"n": record.payload["n"] + 1},
                    expected_version=record.version,
                )
                return
            except VersionConflict:
                continue

    await asyncio.gather(*(bump() for _ in range(50)))
    final = await store.get("counter")
    assert final is not None and final.payload == {"n": 50} and final.version == 51


async def test_returned_records_do_not_alias_stored_state() -> None:
    store = InMemoryJobStore()
    payload = {"list": [1]}
    record = await store.create("j", payload, ttl_seconds=60)
    payload["list"].append(2)
    assert record.payload is not None
    record.payload["list"].append(3)
    assert (await store.get("j")).payload == {"list": [1]}  # type: ignore[union-attr]
    assert (await store.update("j", status=JobStatus.RUNNING)).payload == {"list": [1]}
