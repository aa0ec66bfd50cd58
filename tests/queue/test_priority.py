"""Priorities (queue/priority.py): enqueue at "high", "normal" or "low"; a take fills its
slots from the highest level with jobs waiting, bar the fair turns that keep the lower
ones from starving; a job keeps its level through retries, releases, the reaper and a
dead-letter requeue; a paused type takes nothing from any level; an expired job leaves
its level's list; bad levels are refused with nothing written. Runs on a single node
and on the cluster (the claim, enqueue, fail, promote and expiry scripts are multi-key)."""

from __future__ import annotations

from typing import Any

import pytest

from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.keys import WAKE_MARKER
from platform_common.jobs.queue.envelope import unpack_queued
from platform_common.jobs.queue.priority import FAIR_TURN
from platform_common.jobs.status import QueueState
from platform_common.jobs.worker.attempt_calls import TypePaused
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, WRONG_TYPES, Env, refused
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, fast_settings, running_worker
from tests.support.stored_jobs import make_packed_due

pytestmark = faults.FAULT_QUEUE

HIGH, LOW = DINING.level_queues


async def enqueue(env: Env, priority: str | None, **overrides: Any) -> str:
    job_id: str = await env.queue.enqueue(make_job(**overrides), priority=priority)
    return job_id


async def take(env: Env, count: int, call: str = "t") -> list[str]:
    """The ids one take of `count` slots claims, in slot order."""
    tokens = [f"{call}-{i}" for i in range(count)]
    _, claims = await env.leases.take("worker-1", tokens)
    return [claim.job_id for claim in claims]


# -- order ---------------------------------------------------------------------------
async def test_a_take_fills_from_the_highest_level_first(env: Env) -> None:
    normal = await enqueue(env, None)
    low = await enqueue(env, "low")
    high = [await enqueue(env, "high") for _ in range(2)]
    # Each level waits on its own list; the queue list holds the normal job only (it was
    # not empty: no wake marker).
    assert await env.raw.lrange(DINING.queue, 0, -1) == [normal]
    assert await env.raw.lrange(HIGH, 0, -1) == high[::-1]
    assert await env.raw.lrange(LOW, 0, -1) == [low]
    assert await take(env, 4) == [*high, normal, low]  # slots 1-4: no fair turn
    for key in (DINING.queue, HIGH, LOW):
        assert await env.raw.llen(key) == 0
    # The claim keeps each job's level in its job hash (absent: normal).
    levels = [await env.raw.hget(DINING.job(job_id), "priority") for job_id in [*high, low]]
    assert levels == ["high", "high", "low"]
    assert await env.raw.hget(DINING.job(normal), "priority") is None


async def test_fair_turns_keep_the_lower_levels_from_starving(env: Env) -> None:
    """Jobs numbered k (the type's started count) with k % 10 == 0 come from the lowest
    level with jobs waiting, k % 10 == 5 from the one below the highest: with every level
    waiting, 8 of 10 are high, 1 normal, 1 low."""
    assert FAIR_TURN == 10
    level_of = {}
    for level in ("high", "normal", "low"):
        for _ in range(30 if level == "high" else 4):
            level_of[await enqueue(env, level)] = level
    order = [level_of[job_id] for job_id in await take(env, 20, "a")]
    assert order[4] == "normal" and order[14] == "normal"  # jobs 5 and 15
    assert order[9] == "low" and order[19] == "low"  # jobs 10 and 20
    assert order.count("high") == 16
    # (The first high call found the queue list empty: its wake marker waits at the tail,
    # behind the normal jobs' ids, and is dropped when met.)
    # Taken one slot at a time, the count carries on across calls: job 25 is normal, 30 low.
    singles = [level_of[(await take(env, 1, f"s{i}"))[0]] for i in range(10)]
    assert singles == ["high"] * 4 + ["normal"] + ["high"] * 4 + ["low"]


async def test_with_two_levels_the_lower_gets_the_fair_turns(env: Env) -> None:
    level_of = {}
    for level in ("high", "low"):
        for _ in range(10):
            level_of[await enqueue(env, level)] = level
    order = [level_of[job_id] for job_id in await take(env, 10)]
    assert order == ["high"] * 4 + ["low"] + ["high"] * 4 + ["low"]


async def test_given_jobs_go_back_while_a_higher_level_waits(env: Env) -> None:
    normal = await enqueue(env, None)
    high = await enqueue(env, "high")
    before = await env.raw.lrange(DINING.queue, 0, -1)
    taken = await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    assert taken == normal
    # The claim puts it back where it was and says "take": no claim, more waiting.
    assert await env.leases.claim("worker-1", [(normal, "t-1")]) == (1, [])
    assert await env.raw.lrange(DINING.queue, 0, -1) == before
    assert await env.raw.llen(DINING.processing) == 0
    assert await take(env, 2) == [high, normal]


async def test_a_wake_marker_wakes_an_idle_worker_and_is_never_claimed(env: Env) -> None:
    """A high job into an empty queue list pushes a marker there (an idle worker's BLMOVE
    returns it); given, it is dropped and the worker takes the high job."""
    high = [await enqueue(env, "high") for _ in range(2)]
    # A marker for the first call; the second found the list not empty.
    assert await env.raw.lrange(DINING.queue, 0, -1) == [WAKE_MARKER]
    woke = await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    assert woke == WAKE_MARKER
    assert await env.leases.claim("worker-1", [(woke, "t-1")]) == (1, [])
    assert await env.raw.llen(DINING.processing) == 0
    # A take that leaves high jobs waiting, the queue list empty, wakes the next worker.
    assert await take(env, 1, "w") == high[:1]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [WAKE_MARKER]
    await env.raw.delete(DINING.queue)
    assert await take(env, 4) == high[1:]
    assert await env.raw.llen(DINING.queue) == 0  # none left waiting: no marker
    # A marker met by a take is dropped too; nothing is left anywhere.
    await env.raw.lpush(DINING.queue, WAKE_MARKER)
    normal = await enqueue(env, None)
    assert await take(env, 4, "u") == [normal]
    for key in (DINING.queue, HIGH, LOW):
        assert await env.raw.llen(key) == 0
    assert await env.raw.lrange(DINING.processing, 0, -1) == [normal, *high[::-1]]


# -- enqueue_many ----------------------------------------------------------------------
async def test_enqueue_many_takes_one_level_or_one_per_job(env: Env) -> None:
    jobs = [make_job() for _ in range(4)]
    ids = await env.queue.enqueue_many(jobs, priority=["low", "high", None, "high"])
    assert await env.raw.lrange(HIGH, 0, -1) == [ids[3], ids[1]]
    assert await env.raw.lrange(LOW, 0, -1) == [ids[0]]
    assert ids[2] in await env.raw.lrange(DINING.queue, 0, -1)
    for job_id, level in zip(ids, ["low", "high", "normal", "high"], strict=True):
        assert unpack_queued(await env.raw.hget(DINING.queued, job_id)).priority == level
    assert (await env.queue.stats("dining")).queued == 4
    lows = await env.queue.enqueue_many([make_job() for _ in range(3)], priority="low")
    assert await env.raw.lrange(LOW, 0, 2) == lows[::-1]


# -- a job keeps its level -------------------------------------------------------------
async def test_a_retry_a_release_and_a_requeue_keep_the_level(env: Env) -> None:
    job_id = await enqueue(env, "low")
    [claimed] = await take(env, 1)
    assert await env.leases.fail(claimed, "t-0", "boom") == QueueState.RETRYING
    await env.raw.zadd(DINING.delayed, {job_id: 0}, xx=True)
    assert await env.chores.promote() == 1
    assert await env.raw.lrange(LOW, 0, -1) == [job_id]  # its level's list, not the queue's
    [again] = await take(env, 1, "r")
    assert again == job_id
    assert await env.leases.fail(job_id, "r-0", "bye", mode="release") == "released"
    assert await env.raw.lrange(LOW, 0, -1) == [job_id]
    [third] = await take(env, 1, "x")
    await env.leases.fail(third, "x-0", "boom", mode="corrupt")  # dead-lettered now
    assert await env.queue.dead_letters.requeue("dining", [job_id]) == [job_id]
    assert await env.raw.lrange(LOW, 0, -1) == [job_id]


async def test_a_scheduled_job_is_queued_at_its_level(env: Env) -> None:
    job_id = await env.queue.enqueue(make_job(), delay=30, priority="high")
    assert await env.raw.hget(DINING.job(job_id), "priority") == "high"
    assert await env.counter("leveled") == "1"
    await env.raw.zadd(DINING.delayed, {job_id: 0}, xx=True)  # due now
    assert await env.chores.promote() == 1
    assert await env.raw.lrange(HIGH, 0, -1) == [job_id]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [WAKE_MARKER]  # an idle worker wakes
    assert await take(env, 1) == [job_id]


# -- pause -----------------------------------------------------------------------------
async def test_a_paused_type_takes_nothing_from_any_level(env: Env) -> None:
    for level in ("high", "normal", "low"):
        await enqueue(env, level)
    await env.queue.pause("dining")
    before = await env.snapshot()
    with pytest.raises(TypePaused):
        await take(env, 3)
    woke = await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    with pytest.raises(TypePaused):
        await env.leases.claim("worker-1", [(woke, "t-1")])
    assert await env.snapshot() == before
    await env.queue.resume("dining")
    assert len(await take(env, 3)) == 3


# -- expiry ----------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["high", "low"])
async def test_an_expired_waiting_job_leaves_its_level(env: Env, level: str) -> None:
    job_id = await enqueue(env, level)
    kept = await enqueue(env, level)
    await make_packed_due(env.raw, DINING, [job_id])
    assert await env.queue.cleanup("dining") == [job_id]
    lists = {"high": HIGH, "low": LOW}
    assert await env.raw.lrange(lists[level], 0, -1) == [kept]
    assert (await env.queue.get_result(job_id, "dining")).status == "expired"  # type: ignore[union-attr]


async def test_an_expired_retry_leaves_its_level(env: Env) -> None:
    job_id = await enqueue(env, "high")
    [claimed] = await take(env, 1)
    await env.leases.fail(claimed, "t-0", "boom", mode="release")
    assert await env.raw.lrange(HIGH, 0, -1) == [job_id]
    await env.raw.hset(DINING.job(job_id), "expires_at", "1")
    await env.raw.zadd(DINING.expiry, {job_id: 1})
    assert await env.queue.cleanup("dining") == [job_id]
    assert await env.raw.llen(HIGH) == 0


# -- bad input -------------------------------------------------------------------------
BAD_LEVELS = ["urgent", "", "HIGH", " high", 1, 0, True, b"high", 2.5, {"high"}, ["high", "low"]]


@pytest.mark.parametrize(
    "level", BAD_LEVELS, ids=lambda level: f"{type(level).__name__}-{level!s:.10}"
)
async def test_a_level_that_is_not_one_is_refused(env: Env, level: object) -> None:
    before = await env.snapshot()
    with pytest.raises(InvalidPayload) as info:
        await env.queue.enqueue(make_job(), priority=level)  # type: ignore[arg-type]
    assert list(info.value.errors) == ["priority"]
    assert "'high', 'normal', 'low'" in info.value.errors["priority"]
    with pytest.raises(InvalidPayload) as many:
        await env.queue.enqueue_many([make_job()], priority=level)  # type: ignore[arg-type]
    assert list(many.value.errors) in (["priority"], ["priority[0]"])
    assert await env.snapshot() == before


async def test_enqueue_many_names_the_job_whose_level_is_wrong(env: Env) -> None:
    before = await env.snapshot()
    jobs = [make_job() for _ in range(3)]
    with pytest.raises(InvalidPayload) as info:
        await env.queue.enqueue_many(jobs, priority=["high", "soon", None])
    assert list(info.value.errors) == ["priority[1]"]
    with pytest.raises(InvalidPayload, match="gives 2 levels for 3 jobs"):
        await env.queue.enqueue_many(jobs, priority=["high", "low"])
    assert await env.snapshot() == before


# -- the fault matrix of the levels' lists ---------------------------------------------
LEVEL_FAULTS = [
    pytest.param(key, kind, id=f"{key.rsplit(':', 1)[1]}-{kind}")
    for key in (HIGH, LOW)
    for kind in sorted(WRONG_TYPES)
    if kind != "list"
]


@pytest.mark.parametrize(("key", "kind"), LEVEL_FAULTS)
async def test_every_script_refuses_a_level_list_of_another_type(
    env: Env, key: str, kind: str
) -> None:
    """Enqueue at that level, the take and the claim of given jobs, the promoter, the fail
    of a running job, both expiries and a dead-letter requeue: CorruptQueueState naming
    the list, nothing written."""
    level, other = ("high", "low") if key == HIGH else ("low", "high")
    retry = await env.due_retry()
    dead = await env.dead()
    running = await env.running()
    await enqueue(env, other)  # the type uses levels: the claim reads their lists
    await env.raw.lrem(DINING.queue, 0, WAKE_MARKER)  # (its wake marker: not needed here)
    normal = await enqueue(env, None)
    await env.raw.hset(DINING.job(retry), "priority", level)
    await env.plant(key, kind)
    await refused(env, lambda: enqueue(env, level), key)
    await refused(env, lambda: env.leases.take("worker-1", ["t-1"]), key)
    await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    await refused(env, lambda: env.leases.claim("worker-1", [(normal, "t-2")]), key)
    await refused(env, env.chores.promote, key)
    await refused(env, lambda: env.leases.fail(running.job_id, running.token, "x"), key)
    await env.raw.zadd(DINING.expiry, {retry: 1})
    await refused(env, lambda: env.queue.cleanup("dining"), key)
    await env.raw.zrem(DINING.expiry, retry)
    # The bucket expiry of a waiting job (its expiry bucket wholly past)...
    waiting = await enqueue(env, other)
    await make_packed_due(env.raw, DINING, [waiting])
    await refused(env, lambda: env.queue.cleanup("dining"), key)
    # ...and a dead-letter requeue.
    await refused(env, lambda: env.queue.dead_letters.requeue("dining", [dead]), key)


async def test_a_type_that_never_used_levels_does_not_read_their_lists(env: Env) -> None:
    """The stats field `leveled` (jobs ever enqueued at high or low) stays absent, and the
    claim reads no level list: a normal take costs what it did before levels."""
    await env.plant(HIGH, "string")
    normal = await enqueue(env, None)
    assert await take(env, 2) == [normal]
    assert await env.counter("leveled") is None
    await env.raw.delete(HIGH)
    await enqueue(env, "low")
    assert await env.counter("leveled") == "1"


@pytest.mark.parametrize("value", faults.NOT_INTEGERS)
@pytest.mark.parametrize("scheduled", [False, True], ids=["now", "scheduled"])
async def test_enqueue_at_a_level_refuses_a_leveled_count_that_is_not_one(
    env: Env, value: str, scheduled: bool
) -> None:
    await env.raw.hset(DINING.stats, "leveled", value)
    delay = 30 if scheduled else None
    await refused(
        env, lambda: env.queue.enqueue(make_job(), priority="low", delay=delay), DINING.stats
    )
    await enqueue(env, None)  # a normal enqueue does not read it


# -- a worker end to end ---------------------------------------------------------------
@pytest.mark.single_node("the claim's levels run on the cluster above; this waits on a worker")
async def test_an_idle_worker_wakes_for_a_high_job_and_runs_the_levels_in_order(
    env: Env, redis_url: str
) -> None:
    """An idle worker blocks on the queue list (BLMOVE) and asks again each time it
    returns empty: only the wake marker there can start the high job. Then a backlog
    runs high first, low last."""
    ran = RanJobs()
    settings = fast_settings(redis_url, block_timeout=1.0)
    async with running_worker(settings, ran, concurrency=1):
        first = await enqueue(env, "high")
        await eventually(lambda: env.queue.get_result(first, "dining"))
        await env.queue.pause("dining")
        low = await enqueue(env, "low")
        normal = await enqueue(env, None)
        high = await enqueue(env, "high")
        await env.queue.resume("dining")
        await eventually(lambda: env.queue.get_result(low, "dining"))
    assert ran.ran == [first, high, normal, low]


# -- with limits -----------------------------------------------------------------------
async def test_a_limit_decides_how_many_start_and_the_levels_which(env: Env) -> None:
    """A take cut by a limit claims the first jobs of its slot order (high first) and
    leaves every other job on its own level's list, in place."""
    low, normal, high, high_2 = [
        await enqueue(env, level) for level in ("low", None, "high", "high")
    ]
    await env.queue.set_limits("dining", max_running=1)
    assert await take(env, 4) == [high]
    assert await env.raw.lrange(HIGH, 0, -1) == [high_2]
    assert await env.raw.lrange(LOW, 0, -1) == [low]
    assert normal in await env.raw.lrange(DINING.queue, 0, -1)
    assert await env.raw.llen(DINING.processing) == 1
    await env.queue.set_limits("dining", max_running=None, rate="2/h", burst=2)
    assert await take(env, 4, "u") == [high_2, normal]  # the rate's burst: two more
    assert await env.raw.lrange(LOW, 0, -1) == [low]
