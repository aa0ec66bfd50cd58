"""The per-minute history (lua/queue_history.lua, Chores.record_history): one sample a
minute however many workers record it, the counters and depths as they stood, capped at
HISTORY_MINUTES and trimmed in the same call. Minutes are given explicitly (`now_ms`),
never waited for; one worker proves the chore loop records one on its own. The fault
cases (keys of another type, counters that do not parse) are in test_script_faults.py."""

from __future__ import annotations

import asyncio

import pytest

from platform_common.jobs.keys import HISTORY_MINUTES, STATS_COUNTERS, QueueKeys
from platform_common.jobs.operations.job_search import find_job
from platform_common.jobs.operations.recorded_history import HistoryReader
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.worker import Chores
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
MINUTE = 60_000
T0 = 29_000_000 * MINUTE
"""A minute's start (ms) in 2025: explicit, so no test depends on when it runs."""
TOKEN = "token-1"


async def _entries(env: QueueEnv) -> list[tuple[str, dict[str, str]]]:
    entries: list[tuple[str, dict[str, str]]] = await env.raw.xrange(DINING.history)
    return entries


async def test_three_workers_write_one_sample_a_minute(env: QueueEnv, redis_url: str) -> None:
    await env.queue.enqueue(make_job())
    settings = fast_settings(redis_url)
    others = [await JobQueue.connect(settings) for _ in range(2)]
    try:
        workers = [env.chores, *(Chores(q.connection, "dining") for q in others)]
        for minute, offsets in ((0, (5, 17, 59_999)), (1, (0, 3, 40_000))):
            steps = await asyncio.gather(
                *(
                    chores.record_history(now_ms=T0 + minute * MINUTE + offset)
                    for chores, offset in zip(workers, offsets, strict=True)
                )
            )
            assert sorted(step.wrote for step in steps) == [False, False, True]
    finally:
        for other in others:
            await other.aclose()
    entries = await _entries(env)
    assert [entry_id for entry_id, _ in entries] == [f"{T0}-0", f"{T0 + MINUTE}-0"]
    for _, fields in entries:
        assert T0 <= int(fields["at"]) < T0 + 2 * MINUTE


async def test_a_sample_holds_the_counters_and_depths(env: QueueEnv) -> None:
    waiting = await env.queue.enqueue(make_job())
    await env.queue.enqueue(make_job())
    await env.queue.enqueue(make_job(), delay=30)
    assert await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == waiting
    _, claims = await env.leases.claim("worker-1", [(waiting, TOKEN)])
    assert [c.job_id for c in claims] == [waiting]
    await env.raw.lpush(DINING.dead, "gone-1")  # a dead letter, as the list counts them
    step = await env.chores.record_history(now_ms=T0 + 15_000)
    assert step.wrote and step.next_minute_in == 45.0
    [(entry_id, fields)] = await _entries(env)
    assert entry_id == f"{T0}-0"
    assert fields == {
        "at": str(T0 + 15_000),
        **{name: "0" for name in STATS_COUNTERS},
        "enqueued": "3",
        "started": "1",
        "queued": "1",
        "running": "1",
        "delayed": "1",
        "dead": "1",
    }


async def test_the_history_keeps_its_last_day_and_trims_in_the_same_call(env: QueueEnv) -> None:
    # A full day already recorded (as the script writes it), then the next minute.
    pipe = env.raw.pipeline(transaction=False)
    for minute in range(HISTORY_MINUTES):
        pipe.xadd(DINING.history, {"at": T0 + minute * MINUTE}, id=f"{T0 + minute * MINUTE}-0")
    await pipe.execute()
    assert (await env.chores.record_history(now_ms=T0 + HISTORY_MINUTES * MINUTE)).wrote
    assert await env.raw.xlen(DINING.history) == HISTORY_MINUTES
    first: list[tuple[str, dict[str, str]]] = await env.raw.xrange(DINING.history, count=1)
    assert first[0][0] == f"{T0 + MINUTE}-0"
    # Workers stopped for two days: the next sample is the whole history.
    later = T0 + 3 * HISTORY_MINUTES * MINUTE
    assert (await env.chores.record_history(now_ms=later)).wrote
    assert [entry_id for entry_id, _ in await _entries(env)] == [f"{later}-0"]


async def test_a_newer_sample_than_the_minute_is_left_alone(env: QueueEnv) -> None:
    """Redis' clock stepped back (a failover to a replica whose clock is behind): the
    minute already has a later sample, which stays the newest; nothing is written."""
    assert (await env.chores.record_history(now_ms=T0 + 5 * MINUTE)).wrote
    before = await _entries(env)
    step = await env.chores.record_history(now_ms=T0 + MINUTE + 1_000)
    assert not step.wrote and step.next_minute_in == 59.0
    assert await _entries(env) == before


async def test_without_a_time_the_sample_is_of_redis_minute(env: QueueEnv) -> None:
    step = await env.chores.record_history()
    now = await env.redis_ms()
    [(entry_id, fields)] = await _entries(env)
    minute = int(entry_id.removesuffix("-0"))
    at = int(fields["at"])
    assert minute % MINUTE == 0 and minute <= at < minute + MINUTE and at <= now
    assert step.wrote and 0 < step.next_minute_in <= 60


@pytest.mark.single_node("refused before any Redis call")
@pytest.mark.parametrize("now_ms", [0, 59_999, -1, True, 1.5e12])
async def test_a_time_that_is_no_minute_is_refused_before_redis(env: QueueEnv, now_ms: int) -> None:
    with pytest.raises(ValueError, match="now_ms"):
        await env.chores.record_history(now_ms=now_ms)
    assert await _entries(env) == []


@pytest.mark.single_node("the chore loop's pacing; the script's keys share one slot either way")
async def test_a_running_worker_records_the_minute(redis_url: str, env: QueueEnv) -> None:
    async def handler(payload: object) -> str:
        return "ok"

    async with running_worker(fast_settings(redis_url), handler):
        entries = await eventually(lambda: _entries(env))
    minute = int(entries[0][0].removesuffix("-0"))
    assert minute % MINUTE == 0 and len(entries) == 1


async def test_the_readers_find_the_samples_and_the_jobs_on_any_backend(
    env: QueueEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """HistoryReader and find_job pipeline reads of many types' keys: on a cluster each
    type is a slot of its own."""
    others = ["flights", "lodging"]
    for agent_type in others:
        await env.queue.connection.register_type(agent_type)
    for minute in range(3):
        await env.chores.record_history(now_ms=T0 + minute * MINUTE + 7)
    await env.raw.xadd(QueueKeys("flights").history, {"at": "x"}, id=f"{T0}-0")
    reader = HistoryReader()
    for _ in range(2):
        samples = await reader.read(env.queue, ["dining", *others], T0 // MINUTE, T0 // MINUTE + 5)
    assert sorted(samples["dining"]) == [T0 // MINUTE + m for m in range(3)]
    assert samples["flights"] == {} and samples["lodging"] == {}
    assert samples["dining"][T0 // MINUTE].at == (T0 + 7) / 1000
    logged = [r.getMessage() for r in caplog.records if "history of agent type" in r.getMessage()]
    assert len(logged) == 1, logged  # two reads, one warning
    assert logged[0].startswith("history of agent type flights: a history entry does not parse")
    job_id = await env.queue.enqueue(make_job())
    assert await find_job(env.queue, [*others, "dining"], job_id) == ["dining"]
    assert await find_job(env.queue, others, job_id) == []
