"""One harness per JobStore backend, so a contract test is written once and run on each
(tests/store/conftest.py makes one per backend: memory, redis, cluster).

A harness makes stores (closing them after the test) and gives the test what the
contract does not: the remaining TTL of a record, the raw time index, and a way to
let time pass (a fake clock for memory, a short real wait for Redis).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from platform_common.jobs import InMemoryJobStore, RedisJobStore
from platform_common.jobs.keys import StoreKeys
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.store.contract import BaseJobStore

AGENT = "contract-agent"


class FakeClock:
    """A wall clock that only moves when told to (memory backend)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    kind: str
    redis_url: str | None = None
    raw: RedisClient | None = None
    clock: FakeClock = field(default_factory=FakeClock)
    stores: list[BaseJobStore] = field(default_factory=list)

    def make(self, **options: Any) -> BaseJobStore:
        options.setdefault("agent", AGENT)
        store: BaseJobStore
        if self.kind == "memory":
            options.setdefault("now", self.clock)
            store = InMemoryJobStore(**options)
        else:
            assert self.redis_url is not None
            store = RedisJobStore(self.redis_url, **options)
        self.stores.append(store)
        return store

    async def remaining_ttl(self, store: BaseJobStore, job_id: str) -> float | None:
        if isinstance(store, InMemoryJobStore):
            stored = store._records.get(job_id)
            return None if stored is None else stored.expires_at - self.clock()
        assert self.raw is not None and isinstance(store, RedisJobStore)
        ms = await self.raw.pttl(store.keys.record(job_id))
        return None if ms < 0 else ms / 1000

    async def pass_time(self, seconds: float) -> None:
        """Let `seconds` pass for TTL purposes (fake clock, or a real wait on Redis)."""
        if self.kind == "memory":
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    async def wait_gone(self, store: BaseJobStore, job_id: str, deadline_s: float) -> float:
        """Poll until the record has expired; returns how long it took (Redis) or 0."""
        if self.kind == "memory":
            return 0.0
        started = time.monotonic()
        while await store.get(job_id) is not None:
            if time.monotonic() - started > deadline_s:
                raise AssertionError(f"{job_id} still there after {deadline_s}s")
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    async def index(self, store: BaseJobStore, bucket: str) -> list[str]:
        """The raw index members of a bucket, oldest first."""
        if isinstance(store, InMemoryJobStore):
            return store.debug_index().get(bucket, [])
        assert self.raw is not None
        members: list[str] = await self.raw.zrange(StoreKeys(store.agent).index(bucket), 0, -1)
        return members

    async def drop_record(self, store: BaseJobStore, job_id: str) -> None:
        """Remove a record behind the store's back, leaving its index entry dangling
        (what a TTL expiry does in Redis)."""
        if isinstance(store, InMemoryJobStore):
            del store._records[job_id]
        else:
            assert self.raw is not None and isinstance(store, RedisJobStore)
            await self.raw.delete(store.keys.record(job_id))

    async def seed_same_time(
        self, store: BaseJobStore, jobs: list[tuple[str, str]], timestamps: int = 10
    ) -> None:
        """Store (job_id, owner) records sharing `timestamps` distinct created_at values,
        indexed (memory: a frozen clock; Redis: written raw, then backfilled)."""
        if isinstance(store, InMemoryJobStore):
            start = self.clock.now
            for n, (job_id, owner) in enumerate(jobs):
                self.clock.now = start + n % timestamps
                await store.create(job_id, {"n": n}, ttl_seconds=3600, owner_oid=owner)
            self.clock.now = start + timestamps
            return
        assert self.raw is not None and isinstance(store, RedisJobStore)
        base = int(time.time()) - 3600
        async with self.raw.pipeline(transaction=False) as pipe:
            for n, (job_id, owner) in enumerate(jobs):
                stamp = f"{base + n % timestamps}.000000"
                key = store.keys.record(job_id)
                pipe.hset(key, mapping={"status": "pending", "payload": f'{{"n":{n}}}',
                                        "created_at": stamp, "updated_at": stamp,
                                        "version": "1", "owner_oid": owner})  # fmt: skip
                pipe.expire(key, 3600)
            await pipe.execute()
        report = await store.backfill_time_index()
        assert report.added == len(jobs)

    async def aclose(self) -> None:
        for store in self.stores:
            await store.close()
        if self.raw is not None:
            await self.raw.aclose()


async def harness_for(kind: str, redis_url: str | None) -> AsyncIterator[Harness]:
    """A harness of `kind` for a module's own fixture (tests/store/test_backfill.py; in
    tests/store/ the conftest's parametrized `harness` replaces it)."""
    raw = aioredis.Redis.from_url(redis_url, decode_responses=True) if redis_url else None
    harness = Harness(kind, redis_url=redis_url, raw=raw)
    try:
        yield harness
    finally:
        await harness.aclose()
