"""Fair share (queue/limits.py fair_by; lua/include/fair_keys.lua, fair_turns.lua): with a
fairness key set, the enqueue puts each job with that payload field on its key's list and
the key in the ring; the claim serves the ring round robin, one job a turn, the queue list
(jobs without the key) taking a turn like a key. max_running_per_key skips a key whose
started jobs still hold that many leases. A job keeps its key (job hash field `fair_key`)
through a release, retries, the reaper and a dead-letter requeue, and a scheduled one gets
it at the enqueue. Runs on a single node and on the cluster (every key of the type shares
its slot)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ResponseError

from platform_common.jobs.errors import CorruptQueueState, InvalidPayload, ValidationError
from platform_common.jobs.keys import FAIR_SHARED_ENTRY, WAKE_MARKER
from platform_common.jobs.queue import Limits, Rate
from platform_common.jobs.queue.payload import prepare_job
from platform_common.jobs.worker.attempt_calls import TypeHeldBack, TypePaused
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, Env
from tests.support.queue_handlers import make_job

pytestmark = faults.FAULT_QUEUE


async def keyed(env: Env, tenant: str, count: int = 1, **fields: Any) -> list[str]:
    return [await env.queued(tenant=tenant, **fields) for _ in range(count)]


async def taken(env: Env, count: int, worker: str = "worker-1") -> list[str]:
    tokens = [f"{worker}-{i}-{count}" for i in range(count)]
    _, claims = await env.leases.take(worker, tokens)
    return [claim.job_id for claim in claims]


@pytest.mark.valkey
async def test_a_late_tenant_does_not_wait_behind_an_early_backlog(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    a = await keyed(env, "tenant-a", 6)
    b = await keyed(env, "tenant-b", 2)
    # Each on its key's list, oldest at the right; the ring holds both keys and the
    # queue list's turn.
    assert await env.raw.lrange(DINING.fair_list("tenant-a"), 0, -1) == a[::-1]
    assert sorted(await env.raw.lrange(DINING.fair_ring, 0, -1)) == sorted(
        [FAIR_SHARED_ENTRY, "tenant-a", "tenant-b"]
    )
    # (an idle worker blocks on the queue list: a wake marker went there)
    assert await env.raw.lrange(DINING.queue, 0, -1) == [WAKE_MARKER]
    assert await env.counter("fair_keyed") == "8"
    first = await taken(env, 4)
    assert first == [a[0], b[0], a[1], b[1]]
    # B's list is empty: B left the ring; A goes on, FIFO within its key.
    assert await env.raw.lrange(DINING.fair_ring, 0, -1) == ["tenant-a", FAIR_SHARED_ENTRY]
    assert await taken(env, 8) == a[2:]
    assert not await env.raw.exists(DINING.fair_ring)  # the last key gone: plain FIFO again


async def test_turns_carry_over_from_one_take_to_the_next(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    jobs = {t: await keyed(env, t, 3) for t in ("t-1", "t-2", "t-3")}
    order = [job for take in range(5) for job in await taken(env, 2, f"w{take}")]
    # Round robin across takes: no key served twice before each other one had a turn.
    owner = {job: t for t, ids in jobs.items() for job in ids}
    assert sorted(order) == sorted(owner)
    rounds = [[owner[job] for job in order[i : i + 3]] for i in range(0, 9, 3)]
    assert all(sorted(r) == ["t-1", "t-2", "t-3"] for r in rounds), rounds


async def test_jobs_without_the_key_take_a_turn_like_a_key(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    a = await keyed(env, "tenant-a", 4)
    plain = [await env.queued() for _ in range(2)]  # no tenant: the queue list
    assert await env.raw.lrange(DINING.queue, 0, -1) == [*plain[::-1], WAKE_MARKER]
    # (The queue list's turn comes first: it joined the ring before tenant-a.)
    assert await taken(env, 6) == [plain[0], a[0], plain[1], a[1], a[2], a[3]]


async def test_fair_by_none_is_plain_fifo_and_the_ring_drains(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    a = await keyed(env, "tenant-a", 2)
    await env.queue.set_limits("dining", fair_by="none")
    later = await keyed(env, "tenant-b", 2)  # routed as before fair share
    assert await env.raw.lrange(DINING.queue, 0, -1) == [*later[::-1], WAKE_MARKER]
    assert sorted(await taken(env, 4)) == sorted(a + later)
    assert not await env.raw.exists(DINING.fair_ring)


@pytest.mark.parametrize("by", ["orchestrator_id", "session_id"])
async def test_the_other_keys(env: Env, by: str) -> None:
    await env.queue.set_limits("dining", fair_by=by)
    x = await keyed(env, "t", 2, **{by: "k-x"})
    y = await keyed(env, "t", 1, **{by: "k-y"})
    assert await taken(env, 3) == [x[0], y[0], x[1]]


async def test_hostile_keys_are_kept_apart(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="session_id")
    odd = ["ü" * 200, "a:b}{c", "x\ny", " lead", "q:r:s"]
    ids = {key: await keyed(env, "t", 1, session_id=key) for key in odd}
    for key, on_key in ids.items():
        assert await env.raw.lrange(DINING.fair_list(key), 0, -1) == on_key
    assert sorted(await taken(env, 10)) == sorted(i for v in ids.values() for i in v)


async def test_max_running_per_key_holds_a_key_and_serves_the_others(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=1)
    a = await keyed(env, "tenant-a", 3)
    b = await keyed(env, "tenant-b", 1)
    assert await taken(env, 4) == [a[0], b[0]]  # one of A's at a time
    assert await env.counter("held_back_max_running_per_key") is not None
    with pytest.raises(TypeHeldBack) as info:
        await taken(env, 2, "worker-2")
    assert info.value.limit == "max_running"
    # A's job ending frees A's slot.
    await env.leases.complete(a[0], "worker-1-0-4", '"ok"')
    assert await taken(env, 2, "worker-3") == [a[1]]


async def test_a_lapsed_lease_gives_the_key_its_slot_back(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=1)
    a = await keyed(env, "tenant-a", 2)
    assert await taken(env, 2) == [a[0]]
    # The worker died: its lease is gone (as the reaper takes it back).
    await env.raw.zrem(DINING.leases, a[0])
    assert await taken(env, 2, "worker-2") == [a[1]]
    assert await env.raw.zrange(DINING.fair_running("tenant-a"), 0, -1) == [a[1]]


async def test_a_wrong_typed_key_list_is_refused_before_any_write(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    await keyed(env, "tenant-a", 1)
    await env.raw.delete(DINING.fair_list("tenant-a"))
    await env.raw.set(DINING.fair_list("tenant-a"), "planted")
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState):
        await taken(env, 2)
    assert before == await env.snapshot()
    with pytest.raises(CorruptQueueState):
        await keyed(env, "tenant-a", 1)
    assert before == await env.snapshot()


# -- composed with priorities, a pause and the type's limits ----------------------------
async def test_priorities_come_first_and_fair_share_picks_the_normal_job(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    a = await keyed(env, "tenant-a", 3)
    b = await keyed(env, "tenant-b", 1)
    high = await env.queue.enqueue(make_job(tenant="tenant-a"), priority="high")
    low = await env.queue.enqueue(make_job(tenant="tenant-b"), priority="low")
    # A high or low job waits on its level's list, not on its key's.
    assert await env.raw.lrange(DINING.level_queues[0], 0, -1) == [high]
    assert await env.raw.llen(DINING.fair_list("tenant-a")) == 3
    # Slots 1-4 of a fresh type (started 0): no fair turn of the levels; the high job
    # first, then the normal ones by key, round robin.
    assert await taken(env, 4) == [high, a[0], b[0], a[1]]
    # Slot 5 (k = 5: the level below the highest waiting, low) and slot 6: a's last.
    assert await taken(env, 2, "worker-2") == [low, a[2]]


async def test_a_pause_takes_nothing_and_writes_nothing(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=2)
    await keyed(env, "tenant-a", 2)
    await env.queue.pause("dining")
    before = await env.snapshot()
    with pytest.raises(TypePaused):
        await taken(env, 2)
    # A worker woken by the marker gets it back with the pause (nothing else changes).
    woke = await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    with pytest.raises(TypePaused):
        await env.leases.claim("worker-1", [(woke, "t-1")])
    assert await env.snapshot() == before
    await env.queue.resume("dining")
    assert len(await taken(env, 2)) == 2


async def test_given_jobs_go_back_while_the_ring_has_keys(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    plain = await env.queued()
    a = await keyed(env, "tenant-a", 1)
    given = await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    assert given == plain
    remaining, claims = await env.leases.claim("worker-1", [(plain, "t-1")])
    assert (remaining, claims) == (1, [])  # "levels": the worker takes at once
    assert await env.raw.llen(DINING.processing) == 0
    assert sorted(await taken(env, 2)) == sorted([plain, *a])


async def test_the_rate_counts_every_start_and_the_ring_turns_only_for_those(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", rate="2/h", burst=2)
    a = await keyed(env, "tenant-a", 2)
    b = await keyed(env, "tenant-b", 2)
    assert await taken(env, 4) == [a[0], b[0]]  # the burst: two starts
    assert await env.counter("held_back_rate") == "2"
    # Both keys keep their second job in place, and the ring's next turn is a's.
    assert await env.raw.lrange(DINING.fair_list("tenant-a"), 0, -1) == [a[1]]
    assert await env.raw.lrange(DINING.fair_list("tenant-b"), 0, -1) == [b[1]]
    with pytest.raises(TypeHeldBack) as info:
        await taken(env, 1, "worker-2")
    assert info.value.limit == "rate"
    await env.queue.set_limits("dining", rate=None, burst=None)
    assert await taken(env, 4, "worker-3") == [a[1], b[1]]


async def test_max_running_caps_the_type_whichever_key(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running=3)
    a = await keyed(env, "tenant-a", 3)
    b = await keyed(env, "tenant-b", 3)
    assert await taken(env, 6) == [a[0], b[0], a[1]]
    with pytest.raises(TypeHeldBack):
        await taken(env, 1, "worker-2")


# -- hostile input and faults ----------------------------------------------------------
async def test_ten_thousand_tenants_each_get_a_turn_in_order(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=1)
    jobs = [make_job(tenant=f"t{i}") for i in range(10_000)]
    ids = await env.queue.enqueue_many(jobs)
    assert await env.raw.llen(DINING.fair_ring) == 10_001  # each key, and the shared turn
    # One job each: takes of 50 serve 50 keys each, in enqueue order, none twice.
    served = [job for n in range(4) for job in await taken(env, 50, f"w{n}")]
    assert served == ids[:200]


async def test_a_ring_of_capped_keys_is_passed_over_boundedly(env: Env) -> None:
    """Keys at their cap ahead of one that is not: each take looks at most a bounded
    number of entries, sends them to the back and says capped; the free key's job starts
    within a few takes."""
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=1)
    first = await env.queue.enqueue_many([make_job(tenant=f"c{i}") for i in range(300)])
    assert await taken(env, 300, "fill") == first  # every key now at its cap
    await env.queue.enqueue_many([make_job(tenant=f"c{i}") for i in range(300)])
    free = await env.queued(tenant="free")
    got: list[str] = []
    for n in range(10):
        try:
            got = await taken(env, 1, f"w{n}")
        except TypeHeldBack:
            continue
        break
    assert got == [free]
    assert int(await env.counter("held_back_max_running_per_key") or 0) >= 300


async def test_a_ring_of_another_type_is_refused_by_both_scripts(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    await keyed(env, "tenant-a", 1)
    await env.raw.delete(DINING.fair_ring)
    await env.raw.set(DINING.fair_ring, "planted")
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await taken(env, 1)
    assert info.value.key == DINING.fair_ring
    with pytest.raises(CorruptQueueState) as info:
        await keyed(env, "tenant-b", 1)
    assert info.value.key == DINING.fair_ring
    assert await env.snapshot() == before


async def test_a_limits_hash_of_another_type_is_refused_at_enqueue(env: Env) -> None:
    await env.raw.set(DINING.limits, "planted")
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await keyed(env, "tenant-a", 1)
    assert info.value.key == DINING.limits
    assert await env.snapshot() == before


@pytest.mark.parametrize("value", ["007", "x", "1.5"])
async def test_a_fair_keyed_count_that_is_not_one_is_refused(env: Env, value: str) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    await env.raw.hset(DINING.stats, "fair_keyed", value)
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState, match="fair_keyed"):
        await keyed(env, "tenant-a", 1)
    assert await env.snapshot() == before


async def test_fairness_values_that_do_not_parse_are_refused(env: Env) -> None:
    """A client of the protocol sending values that do not parse gets an error and
    nothing is written (the Python producer always sends them well formed)."""
    await env.queue.set_limits("dining", fair_by="tenant")
    job = make_job(tenant="tenant-a")
    keys = env.queue.connection.keys("dining")
    script_keys = [
        keys.queue, keys.stats, keys.queued, keys.expiring, keys.arrivals, keys.arrived,
        keys.deadline_mark, keys.job(job["job_id"]), keys.result(job["job_id"]),
        keys.expiring_bucket(0), keys.delayed, keys.expiry, keys.level_queues[0],
        keys.limits, keys.fair_ring,
    ]  # fmt: skip
    prepared = prepare_job(job)
    before = await env.snapshot()
    for bad in ("9:short", "x:1", "3:abc", "1:a1:b"):
        args = [
            "nonce", 1, 0, prepared.created_at_ms + 60_000, 10_000, 1_000,
            prepared.job_id, prepared.encoded, 60, prepared.created_at_ms, 2, "", "", "", bad,
        ]  # fmt: skip
        with pytest.raises(ResponseError, match="fairness values"):
            await env.queue.connection.run_script(
                env.queue.connection.scripts.enqueue, script_keys, args
            )
    assert await env.snapshot() == before


# -- the fault matrix with fair share on: every key each script writes ------------------
FAIR_ENQUEUE_ROLES = faults.wrong_types(
    ("queue", "list"), ("stats", "hash"), ("queued", "hash"), ("arrived", "hash"),
    ("fair_ring", "list"), ("key_list", "list"), ("fair_since", "hash"),
)  # fmt: skip
"""(The expiring and arrivals sets are written only for a new bucket or second: the base
matrix, test_script_faults.py, puts those cases.)"""
FAIR_TAKE_ROLES = faults.wrong_types(
    ("processing", "list"), ("leases", "zset"), ("stats", "hash"), ("expiry", "zset"),
    ("queue", "list"), ("waiting", "zset"), ("queued", "hash"), ("arrivals", "zset"),
    ("arrived", "hash"), ("fair_ring", "list"), ("key_list", "list"), ("running", "zset"),
    ("fair_since", "hash"),
)  # fmt: skip


def role_key(role: str) -> str:
    if role == "key_list":
        return DINING.fair_list("tenant-a")
    if role == "running":
        return DINING.fair_running("tenant-a")
    return faults.key_of(role)


@pytest.mark.valkey
@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
@pytest.mark.parametrize(("role", "kind"), FAIR_ENQUEUE_ROLES)
async def test_a_fair_enqueue_refuses_a_key_of_another_type(
    env: Env, role: str, kind: str, many: bool
) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    await keyed(env, "tenant-b", 1)  # the ring and a bucket exist: both checked
    await env.plant(role_key(role), kind)
    if many:
        jobs = [make_job(tenant="tenant-a") for _ in range(3)]
        await faults.refused(env, lambda: env.queue.enqueue_many(jobs), role_key(role))
    else:
        await faults.refused(env, lambda: keyed(env, "tenant-a", 1), role_key(role))


@pytest.mark.valkey
@pytest.mark.parametrize(("role", "kind"), FAIR_TAKE_ROLES)
async def test_a_fair_take_refuses_a_key_of_another_type(env: Env, role: str, kind: str) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=5)
    await keyed(env, "tenant-a", 2)
    assert await taken(env, 1) != []  # a running set for tenant-a
    await env.plant(role_key(role), kind)
    await faults.refused(env, lambda: taken(env, 2, "worker-2"), role_key(role))


@pytest.mark.parametrize("tenant", ["", " ", "t" * 201, "tenänt", "a b", 7])
async def test_a_tenant_that_is_no_id_is_refused_with_nothing_written(
    env: Env, tenant: object
) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    before = await env.snapshot()
    with pytest.raises(InvalidPayload) as info:
        await env.queue.enqueue(make_job(tenant=tenant))
    assert "tenant" in info.value.errors
    assert await env.snapshot() == before


async def test_a_tenant_of_200_characters_is_a_key(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    tenant = "t" * 199 + "9"
    (job_id,) = await keyed(env, tenant, 1)
    assert await env.raw.lrange(DINING.fair_list(tenant), 0, -1) == [job_id]


async def test_since_when_each_key_waits_without_a_start(env: Env) -> None:
    """The ring's `since` hash: a key's time is when it joined, then its last start; it
    leaves with the key (the exporter reads the keys' waits here)."""
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=1)
    await keyed(env, "tenant-a", 2)
    await keyed(env, "tenant-b", 1)
    joined = await env.raw.hgetall(DINING.fair_since)
    assert set(joined) == {"tenant-a", "tenant-b"}
    await env.raw.hset(DINING.fair_since, mapping={"tenant-a": "1", "tenant-b": "1"})
    await taken(env, 4)  # a's first and b's only: a stays (capped), b leaves
    after = await env.raw.hgetall(DINING.fair_since)
    assert set(after) == {"tenant-a"} and int(after["tenant-a"]) > 1
    await env.raw.zrem(DINING.leases, *await env.raw.zrange(DINING.leases, 0, -1))
    await taken(env, 1, "worker-2")  # a's last: the ring and its hash go
    assert not await env.raw.exists(DINING.fair_ring, DINING.fair_since)


# -- a job keeps its key -----------------------------------------------------------------
# A job started from its key's list keeps the key in its job hash (`fair_key`): released,
# retried, recovered from a dead worker or requeued from the dead letters, it goes back on
# that list (the ring taking the key back if it had left), never to the shared list,
# where its key's turn and max_running_per_key would not count it.
A_LIST = DINING.fair_list("tenant-a")


async def ring(env: Env) -> list[str]:
    entries: list[str] = await env.raw.lrange(DINING.fair_ring, 0, -1)
    return entries


async def test_a_released_job_goes_back_on_its_keys_list(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    [a] = await keyed(env, "tenant-a")
    assert await taken(env, 1) == [a]
    assert await env.raw.hget(DINING.job(a), "fair_key") == "tenant-a"  # the claim wrote it
    assert not await env.raw.exists(DINING.fair_ring)  # its list emptied: the ring is done
    await env.raw.delete(DINING.queue)  # (the enqueue's wake marker, dropped by no take)
    assert await env.leases.fail(a, "worker-1-0-1", "bye", mode="release") == "released"
    assert await env.raw.lrange(A_LIST, 0, -1) == [a]
    # The key is back in the ring, after the shared list's turn (the ring was empty).
    assert await ring(env) == ["tenant-a", FAIR_SHARED_ENTRY]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [WAKE_MARKER]  # an idle worker wakes
    assert await taken(env, 1, "worker-2") == [a]


async def test_a_retry_goes_back_on_its_keys_list_ahead_of_the_keys_next_jobs(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    a = await keyed(env, "tenant-a", 2)
    b = await keyed(env, "tenant-b", 1)
    assert await taken(env, 1) == [a[0]]
    assert await env.leases.fail(a[0], "worker-1-0-1", "boom") == "retrying"
    await env.raw.zadd(DINING.delayed, {a[0]: 0}, xx=True)  # due now
    assert await env.chores.promote() == 1
    # At the consuming end: it waited its turn already.
    assert await env.raw.lrange(A_LIST, 0, -1) == [a[1], a[0]]
    assert b[0] not in await env.raw.lrange(DINING.queue, 0, -1)
    assert a[0] not in await env.raw.lrange(DINING.queue, 0, -1)
    assert await taken(env, 3, "worker-2") == [b[0], a[0], a[1]]


async def test_a_retry_brings_its_key_back_into_the_ring(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    [a] = await keyed(env, "tenant-a")
    assert await taken(env, 1) == [a]
    assert await env.leases.fail(a, "worker-1-0-1", "boom") == "retrying"
    await env.raw.zadd(DINING.delayed, {a: 0}, xx=True)
    assert not await env.raw.exists(DINING.fair_since)  # (the ring gone with its last key)
    assert await env.chores.promote() == 1
    assert await env.raw.lrange(A_LIST, 0, -1) == [a]
    assert await ring(env) == ["tenant-a", FAIR_SHARED_ENTRY]
    assert list(await env.raw.hgetall(DINING.fair_since)) == ["tenant-a"]  # waits from now
    assert await taken(env, 1, "worker-2") == [a]


async def test_a_requeued_dead_letter_goes_back_on_its_keys_list(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    [a] = await keyed(env, "tenant-a")
    assert await taken(env, 1) == [a]
    assert await env.leases.fail(a, "worker-1-0-1", "boom", mode="corrupt") == "dead"
    await env.raw.delete(DINING.queue)  # (the enqueue's wake marker)
    assert await env.queue.dead_letters.requeue("dining", [a]) == [a]
    assert await env.raw.lrange(A_LIST, 0, -1) == [a]
    assert await ring(env) == ["tenant-a", FAIR_SHARED_ENTRY]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [WAKE_MARKER]
    assert await taken(env, 1, "worker-2") == [a]


async def test_a_scheduled_job_lands_on_its_keys_list_when_due(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    one = await env.queue.enqueue(make_job(tenant="tenant-a"), delay=30)
    many = await env.queue.enqueue_many(
        [make_job(tenant="tenant-b"), make_job(), make_job(tenant="tenant-a")], delay=30
    )
    fields = [await env.raw.hget(DINING.job(job_id), "fair_key") for job_id in [one, *many]]
    assert fields == ["tenant-a", "tenant-b", None, "tenant-a"]
    # Counted as keyed now: the claim reads the ring once the promoter fills it.
    assert await env.counter("fair_keyed") == "3"
    assert not await env.raw.exists(DINING.fair_ring)
    for job_id in [one, *many]:
        await env.raw.zadd(DINING.delayed, {job_id: 0}, xx=True)
    assert await env.chores.promote() == 4
    assert sorted(await env.raw.lrange(A_LIST, 0, -1)) == sorted([one, many[2]])
    assert await env.raw.lrange(DINING.fair_list("tenant-b"), 0, -1) == [many[0]]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [many[1]]
    assert sorted(await ring(env)) == sorted([FAIR_SHARED_ENTRY, "tenant-a", "tenant-b"])
    assert sorted(await taken(env, 4)) == sorted([one, *many])


async def test_a_recovered_job_counts_against_its_keys_cap(env: Env) -> None:
    """max_running_per_key=1: the job of a worker that died goes back on its key's list
    (the reaper, fail mode "lost", then the promoter), so it and the key's next job do
    not run at once."""
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=1)
    a = await keyed(env, "tenant-a", 2)
    assert await taken(env, 2) == [a[0]]
    await env.raw.zadd(DINING.leases, {a[0]: 0}, xx=True)  # its lease lapsed: worker gone
    report = await env.chores.reap()
    assert report.retried == 1
    await env.raw.zadd(DINING.delayed, {a[0]: 0}, xx=True)
    assert await env.chores.promote() == 1
    assert await env.raw.lrange(A_LIST, 0, -1) == [a[1], a[0]]
    # One of A's at a time: the recovered one first, the next waits for its slot.
    assert await taken(env, 2, "worker-2") == [a[0]]
    with pytest.raises(TypeHeldBack):
        await taken(env, 2, "worker-3")
    assert await env.raw.lrange(A_LIST, 0, -1) == [a[1]]


async def test_a_job_taken_before_its_claim_by_a_dead_worker_goes_back_to_its_key(
    env: Env,
) -> None:
    """The reaper's "lost" mode on a job that never started (state queued): a released
    keyed job moved into processing by hand stands for a worker's BLMOVE."""
    await env.queue.set_limits("dining", fair_by="tenant")
    [a] = await keyed(env, "tenant-a")
    assert await taken(env, 1) == [a]
    assert await env.leases.fail(a, "worker-1-0-1", "bye", mode="release") == "released"
    assert await env.raw.lmove(A_LIST, DINING.processing, "RIGHT", "LEFT") == a
    await env.raw.zadd(DINING.leases, {a: 0})
    report = await env.chores.reap()
    assert report.requeued == 1
    assert await env.raw.lrange(A_LIST, 0, -1) == [a]


async def test_a_wrong_typed_key_list_is_refused_on_the_way_back(env: Env) -> None:
    """Release, the reaper ("lost"), the promoter and a dead-letter requeue: each refuses a
    key list of another type before its first write (the key is in no KEYS: named by
    the refusal all the same)."""
    await env.queue.set_limits("dining", fair_by="tenant")
    released, retry, lost, dead = await keyed(env, "tenant-a", 4)
    assert await taken(env, 4) == [released, retry, lost, dead]
    assert await env.leases.fail(retry, "worker-1-1-4", "boom") == "retrying"
    await env.raw.zadd(DINING.delayed, {retry: 0}, xx=True)
    assert await env.leases.fail(dead, "worker-1-3-4", "boom", mode="corrupt") == "dead"
    await env.raw.zadd(DINING.leases, {lost: 0}, xx=True)
    await env.raw.hset(DINING.job(lost), "state", "queued")  # (taken, never claimed)
    await env.raw.set(A_LIST, "planted")
    await faults.refused(
        env, lambda: env.leases.fail(released, "worker-1-0-4", "bye", mode="release"), A_LIST
    )
    await faults.refused(env, env.chores.reap, A_LIST)
    await faults.refused(env, env.chores.promote, A_LIST)
    await faults.refused(env, lambda: env.queue.dead_letters.requeue("dining", [dead]), A_LIST)


async def test_without_the_ring_a_keyed_job_goes_back_to_the_shared_list(env: Env) -> None:
    """An older caller passes no ring: the fail, promote and requeue scripts put a keyed job
    on the queue list, as before fair share."""
    await env.queue.set_limits("dining", fair_by="tenant")
    released, retry, dead = await keyed(env, "tenant-a", 3)
    assert await taken(env, 3) == [released, retry, dead]
    await env.raw.delete(DINING.queue)  # (the enqueue's wake marker)
    connection = env.queue.connection
    scripts = connection.scripts
    keys, args = env.leases.fail_call(released, "worker-1-0-3", "bye", "release")
    assert keys[-1] == DINING.fair_ring
    assert await connection.run_script(scripts.fail, keys[:-1], args) == ["released"]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [released]
    assert await env.leases.fail(retry, "worker-1-1-3", "boom") == "retrying"
    await env.raw.zadd(DINING.delayed, {retry: 0}, xx=True)
    promote_keys = [DINING.delayed, DINING.queue, DINING.waiting, *DINING.level_queues]
    assert await connection.run_script(scripts.promote, promote_keys, [10, DINING.job("")]) == 1
    assert await env.raw.lrange(DINING.queue, 0, -1) == [released, retry]
    assert await env.leases.fail(dead, "worker-1-2-3", "boom", mode="corrupt") == "dead"
    requeue_keys = [DINING.dead, DINING.queue, DINING.expiry, DINING.stats, DINING.waiting]
    requeue_keys += [DINING.job(dead), DINING.result(dead), *DINING.level_queues]
    requeued = await connection.run_script(scripts.dead_requeue, requeue_keys, ["dead", "", dead])
    assert requeued == [1]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [dead, released, retry]
    assert not await env.raw.exists(A_LIST)
    assert not await env.raw.exists(DINING.fair_ring)


async def test_a_since_hash_of_another_type_is_refused_on_the_way_back(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    released, retry, dead = await keyed(env, "tenant-a", 3)
    assert await taken(env, 3) == [released, retry, dead]
    assert await env.leases.fail(retry, "worker-1-1-3", "boom") == "retrying"
    await env.raw.zadd(DINING.delayed, {retry: 0}, xx=True)
    assert await env.leases.fail(dead, "worker-1-2-3", "boom", mode="corrupt") == "dead"
    await env.plant(DINING.fair_since, "string")
    await faults.refused(
        env,
        lambda: env.leases.fail(released, "worker-1-0-3", "bye", mode="release"),
        DINING.fair_since,
    )
    await faults.refused(env, env.chores.promote, DINING.fair_since)
    await faults.refused(
        env, lambda: env.queue.dead_letters.requeue("dining", [dead]), DINING.fair_since
    )


# -- key weights ------------------------------------------------------------------------
async def test_a_key_of_weight_w_takes_w_jobs_in_a_row_on_its_turn(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    assert await env.queue.set_key_weights("dining", {"tenant-a": 3}) == {"tenant-a": 3}
    a = await keyed(env, "tenant-a", 6)
    b = await keyed(env, "tenant-b", 3)
    assert await taken(env, 8) == [*a[:3], b[0], *a[3:6], b[1]]
    # Live: lifted, tenant-a is one job a turn again.
    assert await env.queue.set_key_weights("dining", {"tenant-a": None}) == {}
    assert await env.raw.hget(DINING.limits, "weights") is None
    assert await taken(env, 8, "worker-2") == [b[2]]


async def test_a_weight_stays_within_the_keys_cap(env: Env) -> None:
    await env.queue.set_limits("dining", fair_by="tenant", max_running_per_key=2)
    await env.queue.set_key_weights("dining", {"tenant-a": 5})
    a = await keyed(env, "tenant-a", 5)
    b = await keyed(env, "tenant-b", 1)
    assert await taken(env, 8) == [a[0], a[1], b[0]]


async def test_weights_are_kept_beside_the_limits(env: Env) -> None:
    await env.queue.set_limits("dining", rate="10/s")
    await env.queue.set_key_weights("dining", {"acme": 4, "beta 2": 2})
    assert await env.queue.key_weights("dining") == {"acme": 4, "beta 2": 2}
    assert await env.queue.limits("dining") == Limits("dining", rate=Rate(10, 1000))
    assert await env.raw.hget(DINING.limits, "weights") == "2"
    await env.queue.set_limits("dining", rate=None)
    assert await env.queue.key_weights("dining") == {"acme": 4, "beta 2": 2}
    await env.queue.set_key_weights("dining", {"acme": None, "beta 2": None})
    assert not await env.raw.exists(DINING.limits)


@pytest.mark.parametrize(
    "weights",
    [{}, {"acme": 0}, {"acme": 1001}, {"acme": 2.5}, {"acme": True}, {"": 2}, {" ": 2},
     {"k" * 201: 2}, {"acme": "3"}, ["acme"]],
)  # fmt: skip
async def test_a_bad_weight_is_named_and_nothing_is_written(env: Env, weights: Any) -> None:
    before = await env.snapshot()
    with pytest.raises(ValidationError) as info:
        await env.queue.set_key_weights("dining", weights)
    assert info.value.field == "key_weights"
    assert await env.snapshot() == before


@pytest.mark.parametrize("value", ["0", "1001", "x", "007", "1.5"])
async def test_a_stored_weight_that_does_not_parse_is_refused_before_any_write(
    env: Env, value: str
) -> None:
    await env.queue.set_limits("dining", fair_by="tenant")
    await env.queue.set_key_weights("dining", {"tenant-a": 2})
    await keyed(env, "tenant-a", 2)
    await env.raw.hset(DINING.limits, "weight:tenant-a", value)
    await faults.refused(env, lambda: taken(env, 2), DINING.limits)
