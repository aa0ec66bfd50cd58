"""Fair share (queue/limits.py fair_by; lua/include/fair_keys.lua, fair_turns.lua): with a
fairness key set, the enqueue puts each job with that payload field on its key's list and
the key in the ring; the claim serves the ring round robin, one job a turn, the queue list
(jobs without the key, retries, scheduled and requeued ones) taking a turn like a key.
max_running_per_key skips a key whose started jobs still hold that many leases. Runs on a
single node and on the cluster (every key of the type shares its slot)."""

from __future__ import annotations

from typing import Any

import pytest

from platform_common.jobs.errors import CorruptQueueState
from platform_common.jobs.keys import FAIR_SHARED_ENTRY, WAKE_MARKER
from platform_common.jobs.worker.attempt_calls import TypeHeldBack
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, Env

pytestmark = faults.FAULT_QUEUE


async def keyed(env: Env, tenant: str, count: int = 1, **fields: Any) -> list[str]:
    return [await env.queued(tenant=tenant, **fields) for _ in range(count)]


async def taken(env: Env, count: int, worker: str = "worker-1") -> list[str]:
    tokens = [f"{worker}-{i}-{count}" for i in range(count)]
    _, claims = await env.leases.take(worker, tokens)
    return [claim.job_id for claim in claims]


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
