"""An agent type's limits (JobQueue.set_limits / limits, queue/limits.py): live settings in
Redis, checked before anything is written; the claim applies the rate (a GCRA on Redis'
clock) and max_running (the type's leases) before it takes a job, and a claim held back
writes nothing (a job BLMOVE took goes back in place). Runs on a single node and on the
cluster (the claim's keys share the type's slot)."""

from __future__ import annotations

import asyncio

import pytest

from platform_common.jobs.errors import CorruptQueueState, ValidationError
from platform_common.jobs.queue import JobPayload, Limits, Rate, current_job
from platform_common.jobs.queue.limits import parse_rate
from platform_common.jobs.worker.attempt_calls import TypeHeldBack, TypePaused
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, WRONG_TYPES, Env, refused
from tests.support.keyspace import Snapshot, changed_keys
from tests.support.queue_runtime import eventually, fast_settings, running_worker

pytestmark = faults.FAULT_QUEUE
VALUES_ALIKE = "a value checked or planted is seen alike on a cluster (key types run on both)"


# -- the settings ------------------------------------------------------------------------
async def test_limits_are_set_kept_and_lifted(env: Env) -> None:
    assert await env.queue.limits("dining") == Limits("dining")
    assert not (await env.queue.limits("dining")).any
    limits = await env.queue.set_limits(
        "dining", fair_by="tenant", rate="100/s", burst=20, max_running=8, max_running_per_key=2
    )
    assert limits == Limits("dining", "tenant", Rate(100, 1000), 20, 8, 2)
    assert await env.queue.limits("dining") == limits
    assert await env.raw.hgetall(DINING.limits) == {
        "fair_by": "tenant", "rate": "100", "interval_ms": "1000", "burst": "20",
        "max_running": "8", "max_running_per_key": "2",
    }  # fmt: skip
    # A limit left out stays; None (or fair_by "none") lifts one.
    changed = await env.queue.set_limits("dining", rate=None, fair_by="none")
    assert changed == Limits("dining", None, None, 20, 8, 2)
    lifted = await env.queue.set_limits(
        "dining", burst=None, max_running=None, max_running_per_key=None
    )
    assert lifted == Limits("dining") and not lifted.any
    assert not await env.raw.exists(DINING.limits)  # no limits: the claim reads no key


@pytest.mark.parametrize(
    ("text", "rate", "shown"),
    [
        ("100/s", Rate(100, 1000), "100/s"),
        ("5/m", Rate(5, 60_000), "5/m"),
        ("5 / min", Rate(5, 60_000), "5/m"),
        ("1000/h", Rate(1000, 3_600_000), "1000/h"),
        ("3/10s", Rate(3, 10_000), "3/10s"),
        ("7/250ms", Rate(7, 250), "7/250ms"),
    ],
)
def test_rates_read_as_written(text: str, rate: Rate, shown: str) -> None:
    assert parse_rate(text) == rate
    assert str(rate) == shown and parse_rate(shown) == rate


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"fair_by": "tenant_id"}, "fair_by"),
        ({"fair_by": ""}, "fair_by"),
        ({"fair_by": 5}, "fair_by"),
        ({"rate": "100"}, "rate"),
        ({"rate": "0/s"}, "rate"),
        ({"rate": "-1/s"}, "rate"),
        ({"rate": "1.5/s"}, "rate"),
        ({"rate": "10/0s"}, "rate"),
        ({"rate": "1/2d"}, "rate"),
        ({"rate": "100/s\n"}, "rate"),
        ({"rate": "\u0661\u0660\u0660/s"}, "rate"),  # Arabic-Indic digits
        ({"rate": 100}, "rate"),
        ({"rate": "1/100000h"}, "rate"),
        ({"rate": "2000000000/s"}, "rate"),
        ({"burst": 0}, "burst"),
        ({"burst": True}, "burst"),
        ({"burst": 1.5}, "burst"),
        ({"burst": "5"}, "burst"),
        ({"max_running": -1}, "max_running"),
        ({"max_running": 10**10}, "max_running"),
        ({"max_running_per_key": 0}, "max_running_per_key"),
        # The first bad value is named; a good one beside it is not written either.
        ({"max_running": 5, "burst": 0}, "burst"),
        ({}, "limits"),
    ],
)
@pytest.mark.single_node(VALUES_ALIKE)
async def test_a_bad_value_is_named_and_nothing_is_written(
    env: Env, change: dict[str, object], named: str
) -> None:
    await env.queue.set_limits("dining", max_running=3)
    before = await env.snapshot()
    with pytest.raises(ValidationError) as info:
        await env.queue.set_limits("dining", **change)  # type: ignore[arg-type]
    assert info.value.field == named
    assert await env.snapshot() == before


@pytest.mark.parametrize("agent_type", ["lunch", "", 5])
@pytest.mark.single_node(VALUES_ALIKE)
async def test_limits_of_a_type_never_seen_are_refused(env: Env, agent_type: object) -> None:
    before = await env.snapshot()
    with pytest.raises(ValidationError, match="unknown agent type"):
        await env.queue.set_limits(agent_type, max_running=1)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="unknown agent type"):
        await env.queue.limits(agent_type)  # type: ignore[arg-type]
    assert await env.snapshot() == before


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_running", "0"), ("max_running", "many"), ("rate", "1e3"), ("burst", "-2"),
     ("fair_by", "colour"), ("rate", "5")],  # (rate without interval_ms)
)  # fmt: skip
@pytest.mark.single_node(VALUES_ALIKE)
async def test_a_stored_limit_that_does_not_parse_is_named(
    env: Env, field: str, value: str
) -> None:
    await env.raw.hset(DINING.limits, field, value)
    with pytest.raises(CorruptQueueState) as info:
        await env.queue.limits("dining")
    assert info.value.key == DINING.limits and field in info.value.problem


# -- the claim: max_running --------------------------------------------------------------
async def held_back_only(env: Env, before: Snapshot, counter: str, value: str) -> None:
    """Nothing changed since `before` but the stats hash, whose `counter` is `value`."""
    assert changed_keys(before, await env.snapshot()) == {DINING.stats.encode()}
    assert await env.counter(counter) == value


async def test_max_running_caps_the_take_and_a_capped_claim_writes_nothing(env: Env) -> None:
    ids = [await env.queued() for _ in range(4)]
    await env.queue.set_limits("dining", max_running=2)
    left, claims = await env.leases.take("worker-1", ["t-0", "t-1", "t-2"])
    assert (left, [claim.job_id for claim in claims]) == (2, ids[:2])  # the oldest two
    assert await env.counter("held_back_max_running") == "1"  # the third asked for
    before = await env.snapshot()
    with pytest.raises(TypeHeldBack) as info:
        await env.leases.take("worker-2", ["u-0"])
    assert (info.value.limit, info.value.wait) == ("max_running", None)
    # A job BLMOVE took goes back in its place.
    assert await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == ids[2]
    with pytest.raises(TypeHeldBack):
        await env.leases.claim("worker-2", [(ids[2], "u-1")])
    await held_back_only(env, before, "held_back_max_running", "3")
    assert await env.counter("held_back_rate") is None
    # A job ending frees its slot for the next claim.
    await env.leases.complete(claims[0].job_id, "t-0", '"ok"')
    _, more = await env.leases.take("worker-2", ["u-2", "u-3"])
    assert [claim.job_id for claim in more] == [ids[2]]


async def test_a_replayed_take_hands_back_its_jobs_when_capped(env: Env) -> None:
    """The first run took the jobs (they hold the slots); its reply was lost: the replay
    hands them back instead of being held back by the slots they hold."""
    for _ in range(3):
        await env.queued()
    await env.queue.set_limits("dining", max_running=2)
    _, first = await env.leases.take("worker-1", ["t-0", "t-1"])
    _, again = await env.leases.take("worker-1", ["t-0", "t-1"])
    assert [c.job_id for c in again] == [c.job_id for c in first] and len(first) == 2


async def test_a_lapsed_lease_gives_its_slot_back(env: Env) -> None:
    """A crashed worker holds its slots only as long as its leases: the reaper takes them
    back and the next claim starts the job again (SIGKILL: test_limits_processes.py)."""
    job_id, waiting = await env.queued(), await env.queued()
    await env.queue.set_limits("dining", max_running=1)
    _, claims = await env.leases.take("worker-1", ["t-0"])
    assert [c.job_id for c in claims] == [job_id]
    with pytest.raises(TypeHeldBack):
        await env.leases.take("worker-2", ["u-0"])
    await env.raw.zadd(DINING.leases, {job_id: 0}, xx=True)  # its lease lapsed
    await env.chores.reap()
    _, again = await env.leases.take("worker-2", ["u-1"])
    assert [c.job_id for c in again] == [waiting]  # the slot came back


# -- the claim: rate ---------------------------------------------------------------------
async def test_the_rate_takes_a_burst_then_says_when_the_next_start_is_allowed(env: Env) -> None:
    ids = [await env.queued() for _ in range(5)]
    await env.queue.set_limits("dining", rate="1/h", burst=2)
    _, claims = await env.leases.take("worker-1", ["t-0", "t-1", "t-2"])
    assert [claim.job_id for claim in claims] == ids[:2]
    before = await env.snapshot()
    with pytest.raises(TypeHeldBack) as info:
        await env.leases.take("worker-1", ["t-3"])
    assert info.value.limit == "rate" and info.value.wait is not None
    assert 3590 < info.value.wait <= 3600  # one step of 1/h after the burst
    await held_back_only(env, before, "held_back_rate", "2")  # the take of 3, then this one
    # Live: a faster rate holds from the next claim on (the TAT the old rate left is
    # further ahead than the new rate ever leaves it: one start now, then the new rate).
    await env.queue.set_limits("dining", rate="1/h", burst=1)  # one step now = 1 h
    await env.queue.set_limits("dining", rate="1/m", burst=1)
    _, more = await env.leases.take("worker-1", ["t-4", "t-5"])
    assert [claim.job_id for claim in more] == [ids[2]]
    with pytest.raises(TypeHeldBack) as info:
        await env.leases.take("worker-1", ["t-6"])
    assert info.value.wait is not None and 59 < info.value.wait <= 60


async def test_an_expired_job_spends_no_rate(env: Env) -> None:
    """The rate counts starts: a job the claim expires (past its TTL) starts nothing."""
    (late,) = await faults.taken(env, past_ttl=True)
    fresh = await env.queued()
    await env.queue.set_limits("dining", rate="1/h", burst=1)
    expired: list[tuple[str, str]] = []
    _, claims = await env.leases.claim("worker-1", [(late, "t-0")], expired)
    assert claims == [] and [job_id for job_id, _ in expired] == [late]
    assert not await env.raw.exists(DINING.rate)
    _, claims = await env.leases.take("worker-1", ["t-1"])
    assert [claim.job_id for claim in claims] == [fresh]
    assert await env.raw.pttl(DINING.rate) > 3_500_000


async def test_a_pause_comes_before_the_limits(env: Env) -> None:
    await env.queued()
    await env.queue.set_limits("dining", max_running=1, rate="1/h")
    await env.queue.pause("dining")
    with pytest.raises(TypePaused):
        await env.leases.take("worker-1", ["t-0"])


# -- the fault matrix: the rate key and stored values the claim reads ---------------------
@pytest.mark.parametrize("take", [False, True], ids=["given", "take"])
@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"string"}))
async def test_the_claim_refuses_a_rate_key_of_another_type(
    env: Env, kind: str, take: bool
) -> None:
    await env.queue.set_limits("dining", rate="10/s")
    ids = await faults.taken(env, 1) if not take else [await env.queued()]
    await env.plant(DINING.rate, kind)
    if take:
        await refused(env, lambda: env.leases.take("worker-1", ["t-0"]), DINING.rate)
    else:
        await refused(env, lambda: env.leases.claim("worker-1", [(ids[0], "t-0")]), DINING.rate)


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [
        ("limits", "max_running", "0"),
        ("limits", "max_running", "2.5"),
        ("limits", "burst", "many"),
        ("limits", "rate", "99999999999"),
        ("limits", "interval_ms", "-1"),
        ("limits", "interval_ms", None),  # a rate without its interval
        ("rate", None, "soon"),
        ("rate", None, "1e20"),
        ("rate", None, ""),
    ],
)
async def test_the_claim_refuses_a_stored_limit_that_does_not_parse(
    env: Env, key: str, field: str | None, value: str | None
) -> None:
    await env.queue.set_limits("dining", rate="10/s")
    await env.queued()
    if field is None:
        await env.raw.set(DINING.rate, value or "")
    elif value is None:
        await env.raw.hdel(DINING.limits, field)
    else:
        await env.raw.hset(DINING.limits, field, value)
    planted = DINING.limits if key == "limits" else DINING.rate
    await refused(env, lambda: env.leases.take("worker-1", ["t-0"]), planted)


@pytest.mark.parametrize("field", ["held_back_rate", "held_back_max_running"])
@pytest.mark.parametrize("value", faults.NOT_INTEGERS + faults.NOT_CANONICAL)
@pytest.mark.single_node(VALUES_ALIKE)
async def test_the_claim_refuses_a_malformed_held_back_counter(
    env: Env, field: str, value: str
) -> None:
    """Both are read before the first write whenever the type has limits: which one a
    claim bumps is known only then."""
    await env.queue.set_limits("dining", max_running=5)
    await env.queued()
    await env.raw.hset(DINING.stats, field, value)
    await refused(env, lambda: env.leases.take("worker-1", ["t-0"]), DINING.stats)


async def test_a_type_without_limits_ignores_the_held_back_counters(env: Env) -> None:
    """The FIFO path reads neither (nor the rate key): a type whose limits were lifted
    keeps working whatever they hold."""
    job_id = await env.queued()
    await env.raw.hset(DINING.stats, "held_back_rate", "many")
    await env.raw.set(DINING.rate, "soon")
    _, claims = await env.leases.take("worker-1", ["t-0"])
    assert [claim.job_id for claim in claims] == [job_id]


# -- a worker ----------------------------------------------------------------------------
@pytest.mark.single_node("one worker in this loop; its claims run alike on a cluster")
async def test_a_worker_keeps_to_max_running_and_follows_a_change_live(
    redis_url: str, env: Env
) -> None:
    """One worker of concurrency 4 under max_running 1 runs one job at a time; raised to
    3 while it runs, it runs three at once, without a restart."""
    await env.queue.set_limits("dining", max_running=1)
    running: set[str] = set()
    most = 0
    release = asyncio.Event()

    async def handler(job: JobPayload) -> str:
        nonlocal most
        running.add(current_job().job_id)
        most = max(most, len(running))
        await release.wait()
        running.discard(current_job().job_id)
        return "ok"

    ids = [await env.queued() for _ in range(3)]
    async with running_worker(fast_settings(redis_url), handler, concurrency=4):
        await eventually(lambda: asyncio.sleep(0, len(running) == 1))
        assert most == 1
        await env.queue.set_limits("dining", max_running=3)
        await eventually(lambda: asyncio.sleep(0, len(running) == 3))
        release.set()
        for job_id in ids:
            result = await eventually(lambda job_id=job_id: env.queue.get_result(job_id, "dining"))
            assert result.ok
    assert most == 3
