"""Random create/update/delete/expire/page sequences against a simple model (hypothesis).

The model is a dict of live jobs with their owner and creation time; a walk over all
pages of `list_for_owner` must equal the model's visible jobs, newest first (ties by
job id, newest first too), at any page size.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from platform_common.jobs import IllegalTransition, JobConflict, JobStatus
from tests.support.stores import Harness

JOB_IDS = st.sampled_from([f"job-{n}" for n in range(12)])
OWNERS = st.sampled_from(["", "u1", "u2"])


class IndexModel(RuleBasedStateMachine):
    kind = "memory"
    redis_url: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        if self.redis_url:
            client = redis.Redis.from_url(self.redis_url)
            client.flushall()
            client.close()
            self.raw: Any = self.run(_raw_client(self.redis_url))
        else:
            self.raw = None
        self.harness = Harness(self.kind, redis_url=self.redis_url, raw=self.raw)
        self.store = self.harness.make(time_index=True)
        self.model: dict[str, tuple[str, float]] = {}  # job_id -> (owner, created stamp)
        self.finished: dict[str, bool] = {}
        self.sequence = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.harness.aclose())
        self.loop.close()

    def stamp(self) -> float:
        # Memory: the fake clock (ties happen when it did not move); Redis: TIME, which
        # moves on between two creates (each is a round trip), so creation order.
        self.sequence += 1
        return self.harness.clock.now if self.kind == "memory" else self.sequence

    @rule(job_id=JOB_IDS, owner=OWNERS)
    def create(self, job_id: str, owner: str) -> None:
        if job_id in self.model:
            with pytest.raises(JobConflict):
                self.run(self.store.create(job_id, ttl_seconds=600, owner_oid=owner))
            return
        self.run(self.store.create(job_id, {"o": owner}, ttl_seconds=600, owner_oid=owner))
        self.model[job_id] = (owner, self.stamp())
        self.finished[job_id] = False

    @rule(job_id=JOB_IDS)
    def delete(self, job_id: str) -> None:
        assert self.run(self.store.delete(job_id)) is (job_id in self.model)
        self.model.pop(job_id, None)

    @rule(job_id=JOB_IDS)
    def expire(self, job_id: str) -> None:
        """The record goes away behind the store's back (TTL): its entry dangles."""
        if job_id in self.model:
            self.run(self.harness.drop_record(self.store, job_id))
            del self.model[job_id]

    @rule(job_id=JOB_IDS, status=st.sampled_from([JobStatus.RUNNING, JobStatus.SUCCEEDED]))
    def update(self, job_id: str, status: JobStatus) -> None:
        """Status changes never move a job in the listing (refused ones change nothing)."""
        if job_id not in self.model:
            return
        if self.finished.get(job_id) and status is not JobStatus.SUCCEEDED:
            with pytest.raises(IllegalTransition):
                self.run(self.store.update(job_id, status=status))
            return
        self.run(self.store.update(job_id, status=status))
        self.finished[job_id] = status is JobStatus.SUCCEEDED

    @rule(micros=st.sampled_from([0, 0, 1, 250]))
    def tick(self, micros: int) -> None:
        self.harness.clock.advance(micros / 1_000_000)

    @rule(owner=OWNERS, limit=st.integers(min_value=1, max_value=5))
    def walk(self, owner: str, limit: int) -> None:
        walked: list[str] = []
        cursor = None
        while True:
            page = self.run(self.store.list_for_owner(owner, limit=limit, cursor=cursor))
            assert 0 < len(page.rows) <= limit or (not walked and not page.rows)
            walked += [r.job_id for r in page.rows]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        visible = [(stamp, job_id) for job_id, (o, stamp) in self.model.items() if o in ("", owner)]
        assert walked == [job_id for _, job_id in sorted(visible, reverse=True)]

    @rule()
    def sweep(self) -> None:
        self.run(self.store.sweep_time_index(max_entries=5))

    @invariant()
    def ids_match(self) -> None:
        assert sorted(self.run(self.store.list_ids(limit=100))) == sorted(self.model)


async def _raw_client(url: str) -> Any:
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(url, decode_responses=True)


SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def test_memory_store_matches_the_model() -> None:
    run_state_machine_as_test(
        IndexModel, settings=settings(SETTINGS, max_examples=80, stateful_step_count=40)
    )


def test_redis_store_matches_the_model(redis_url: str) -> None:
    class RedisIndexModel(IndexModel):
        kind = "redis"

    RedisIndexModel.redis_url = redis_url
    run_state_machine_as_test(
        RedisIndexModel, settings=settings(SETTINGS, max_examples=25, stateful_step_count=30)
    )
