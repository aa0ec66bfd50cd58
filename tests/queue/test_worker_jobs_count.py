"""Each worker's count of jobs in progress (and its concurrency), carried by its heartbeat
(queue_heartbeat.lua) into the worker_jobs (and worker_concurrency) hash beside the
workers set: written with each beat, removed when
the worker leaves or is pruned with its heartbeat, refused before any write when either
key holds another type. Against a real Redis (single server and cluster)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from platform_common.jobs.errors import CorruptQueueState
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload
from tests.support.keyspace import changed_keys, snapshot
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker

DINING = QueueKeys("dining")
# A command that makes a key of each type (KEY is replaced by the key).
WRONG_TYPES: dict[str, tuple[str, ...]] = {
    "string": ("SET", "KEY", "not what the queue wrote"),
    "list": ("RPUSH", "KEY", "a"),
    "set": ("SADD", "KEY", "a"),
    "zset": ("ZADD", "KEY", "0", "a"),
    "hash": ("HSET", "KEY", "a", "1"),
}


@dataclass
class Env(QueueEnv):
    async def counts(self) -> dict[str, str]:
        counts: dict[str, str] = await self.raw.hgetall(DINING.worker_jobs)
        return counts

    async def beats(self) -> list[str]:
        members: list[str] = await self.raw.zrange(DINING.workers, 0, -1)
        return members

    async def concurrency(self) -> dict[str, str]:
        slots: dict[str, str] = await self.raw.hgetall(DINING.worker_concurrency)
        return slots


async def test_each_beat_writes_the_workers_count(env: Env) -> None:
    await env.chores.heartbeat("w1", 3)
    await env.chores.heartbeat("w2", 0)
    assert await env.counts() == {"w1": "3", "w2": "0"}
    await env.chores.heartbeat("w1", 1)
    assert await env.counts() == {"w1": "1", "w2": "0"}
    assert sorted(await env.beats()) == ["w1", "w2"]


async def test_leaving_removes_the_count_with_the_heartbeat(env: Env) -> None:
    await env.chores.heartbeat("w1", 2)
    await env.chores.heartbeat("w2", 5)
    await env.chores.heartbeat("w1", leaving=True)
    assert await env.counts() == {"w2": "5"}
    assert await env.beats() == ["w2"]


async def test_a_silent_worker_is_pruned_from_both_keys(env: Env) -> None:
    now_ms = await env.chores.redis_time_ms()
    prune_ms = int(env.queue.settings.heartbeat_interval * 10 * 1000)
    # Two silent past the prune age, one recent; each with a count as its beats wrote.
    await env.raw.zadd(
        DINING.workers,
        {"gone-1": now_ms - prune_ms - 60_000, "gone-2": now_ms - prune_ms - 1, "w2": now_ms},
    )
    await env.raw.hset(DINING.worker_jobs, mapping={"gone-1": 4, "gone-2": 1, "w2": 2})
    await env.chores.heartbeat("w1", 7)
    assert await env.counts() == {"w1": "7", "w2": "2"}
    assert sorted(await env.beats()) == ["w1", "w2"]


async def test_the_concurrency_goes_with_the_heartbeat(env: Env) -> None:
    now_ms = await env.chores.redis_time_ms()
    prune_ms = int(env.queue.settings.heartbeat_interval * 10 * 1000)
    await env.raw.zadd(DINING.workers, {"gone": now_ms - prune_ms - 1})
    await env.raw.hset(DINING.worker_concurrency, mapping={"gone": 4})
    await env.chores.heartbeat("w1", 1, concurrency=8)
    await env.chores.heartbeat("w2", 0, concurrency=2)
    assert await env.concurrency() == {"w1": "8", "w2": "2"}  # "gone" pruned with its beat
    await env.chores.heartbeat("w1", 3)  # a caller that does not say: the recorded one stays
    await env.chores.heartbeat("w2", leaving=True)
    assert await env.concurrency() == {"w1": "8"}


@pytest.mark.parametrize("concurrency", [0, -1, True, 1.5, "4"])
@pytest.mark.cluster_sample(planted=("concurrency",))
async def test_a_concurrency_that_is_not_a_positive_int_is_refused(
    env: Env, concurrency: Any
) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await env.chores.heartbeat("w1", 0, concurrency=concurrency)
    assert await env.beats() == [] and await env.concurrency() == {}


@pytest.mark.parametrize("leaving", [False, True], ids=["beat", "leave"])
@pytest.mark.parametrize(
    ("key", "kind"),
    [
        pytest.param(key, kind, id=f"{name}-{kind}")
        for name, key, native in (
            ("workers", DINING.workers, "zset"),
            ("worker_jobs", DINING.worker_jobs, "hash"),
            ("worker_concurrency", DINING.worker_concurrency, "hash"),
        )
        for kind in sorted(WRONG_TYPES)
        if kind != native
    ],
)
@pytest.mark.cluster_sample(planted=("kind",))
async def test_a_key_of_another_type_is_refused_before_any_write(
    env: Env, key: str, kind: str, leaving: bool
) -> None:
    # Both keys hold something to change: a stale worker to prune, w1 to beat or remove.
    await env.raw.zadd(DINING.workers, {"stale": 1, "w1": 1})
    await env.raw.hset(DINING.worker_jobs, mapping={"stale": 1, "w1": 1})
    await env.raw.hset(DINING.worker_concurrency, mapping={"stale": 1, "w1": 1})
    await env.raw.delete(key)
    await env.raw.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))
    before = await snapshot(env.raw_bytes)
    with pytest.raises(CorruptQueueState) as info:
        await env.chores.heartbeat("w1", 2, leaving=leaving, concurrency=None if leaving else 4)
    assert info.value.key == key, info.value
    assert changed_keys(before, await snapshot(env.raw_bytes)) == set()


@pytest.mark.parametrize(
    ("count", "error"), [(-1, ValueError), (True, TypeError), (1.5, TypeError), ("2", TypeError)]
)
@pytest.mark.cluster_sample(planted=("count", "error"))
async def test_a_count_that_is_not_a_non_negative_int_is_refused(
    env: Env, count: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="in_progress"):
        await env.chores.heartbeat("w1", count)
    assert await env.counts() == {}
    assert await env.beats() == []


async def test_a_running_worker_reports_its_jobs_in_progress(env: Env) -> None:
    release = asyncio.Event()
    started = 0

    async def held(job: JobPayload) -> dict[str, Any]:
        nonlocal started
        started += 1
        await release.wait()
        return {}

    async with running_worker(env.queue.settings, held, concurrency=4) as worker:

        async def count_is(expected: str) -> bool:
            return (await env.counts()).get(worker.worker_id) == expected

        await eventually(lambda: count_is("0"))
        assert (await env.concurrency())[worker.worker_id] == "4"
        await env.queue.enqueue_many([make_job() for _ in range(3)])
        await eventually(lambda: count_is("3"))
        assert started == 3
        release.set()
        await eventually(lambda: count_is("0"))
    # A graceful stop says goodbye: the count goes with the heartbeat.
    assert worker.worker_id not in await env.counts()
    assert worker.worker_id not in await env.beats()
    assert worker.worker_id not in await env.concurrency()
