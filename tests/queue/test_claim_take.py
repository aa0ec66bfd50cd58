"""AttemptCalls.take: the claim script takes the jobs off the queue list itself (one call, one
round trip), as a worker does while the queue holds jobs. The jobs end where LMOVE plus
claim left them (processing, a lease each); a refusal takes nothing; and the call is safe
to send again after a lost reply: its marker makes the replay hand back what the first
call took instead of taking more."""

from __future__ import annotations

from dataclasses import replace

import pytest

from platform_common.jobs.errors import CorruptQueueState
from tests.queue.test_script_faults import (
    CLAIM_SHARED,
    DINING,
    FAULT_QUEUE,
    WRONG_TYPES,
    Env,
    key_of,
    refused,
    wrong_types,
)
from tests.support.stored_jobs import make_packed_due

# The fault tests' queue and Env (the conftest's `env` is made as the imported Env); the
# wrong types rotate over the cluster cases, one per key role (as in test_script_faults).
pytestmark = [pytest.mark.cluster_sample(planted=("kind",)), FAULT_QUEUE]


async def test_take_claims_the_oldest_jobs_into_processing(env: Env) -> None:
    ids = [await env.queued() for _ in range(5)]  # LPUSHed: ids[0] is the oldest
    left, claims = await env.leases.take("worker-1", ["t-0", "t-1", "t-2"])
    assert left == 2
    assert [(claim.job_id, claim.token, claim.attempt) for claim in claims] == [
        (ids[0], "t-0", 1), (ids[1], "t-1", 1), (ids[2], "t-2", 1),
    ]  # fmt: skip
    # As three LMOVE RIGHT LEFT would have left them.
    assert await env.raw.lrange(DINING.processing, 0, -1) == [ids[2], ids[1], ids[0]]
    assert await env.raw.lrange(DINING.queue, 0, -1) == [ids[4], ids[3]]
    assert await env.raw.zcard(DINING.leases) == 3
    for claim in claims:
        assert await env.raw.hmget(DINING.job(claim.job_id), ["state", "token", "worker"]) == [
            "running", claim.token, "worker-1",
        ]  # fmt: skip
    assert await env.counter("started") == "3"
    assert await env.raw.hlen(DINING.queued) == 2


async def test_take_of_an_empty_queue_takes_nothing(env: Env) -> None:
    assert await env.leases.take("worker-1", ["t-0", "t-1"]) == (0, [])
    assert not await env.raw.exists(DINING.processing, DINING.leases, env.leases.take_marker("t-0"))


async def test_a_take_sent_again_hands_back_what_it_took(env: Env) -> None:
    """A lost reply (the connection dropped after Redis ran the call): the same call again
    takes nothing more and returns the same claims; nothing is counted twice."""
    ids = [await env.queued() for _ in range(4)]
    first = await env.leases.take("worker-1", ["t-0", "t-1"])
    before = await env.snapshot()
    again = await env.leases.take("worker-1", ["t-0", "t-1"])
    # The same claims, but for when Redis ran the call (the deadlines are timed from it).
    assert again[0] == first[0]
    assert [replace(claim, redis_now_ms=0) for claim in again[1]] == [
        replace(claim, redis_now_ms=0) for claim in first[1]
    ]
    assert [claim.job_id for claim in again[1]] == ids[:2]
    assert await env.snapshot() == before  # the replay wrote nothing


async def test_a_replay_skips_a_job_no_longer_held_with_its_token(env: Env) -> None:
    await env.queued()
    (claim,) = (await env.leases.take("worker-1", ["t-0"]))[1]
    await env.leases.complete(claim.job_id, "t-0", "1")
    assert await env.leases.take("worker-1", ["t-0"]) == (0, [])


async def test_the_next_take_deletes_the_previous_marker(env: Env) -> None:
    for _ in range(2):
        await env.queued()
    await env.leases.take("worker-1", ["a-0"])
    first = env.leases.take_marker("a-0")
    assert await env.raw.exists(first)
    assert 0 < await env.raw.ttl(first) <= 61  # a lease (fast_settings) and a second
    await env.leases.take("worker-1", ["a-1"], previous="a-0")
    assert not await env.raw.exists(first)
    assert await env.raw.exists(env.leases.take_marker("a-1"))


async def test_take_expires_a_job_past_its_ttl_without_holding_it(env: Env) -> None:
    expired, fresh = await env.queued(), await env.queued()
    await make_packed_due(env.raw, DINING, [expired])
    left, claims = await env.leases.take("worker-1", ["t-0", "t-1"])
    assert (left, [claim.job_id for claim in claims]) == (0, [fresh])
    assert await env.raw.lrange(DINING.processing, 0, -1) == [fresh]
    outcome = await env.queue.get_result(expired, "dining")
    assert outcome is not None and outcome.status == "expired"
    assert (await env.counter("expired"), await env.counter("started")) == ("1", "1")


@pytest.mark.parametrize(("role", "kind"), wrong_types(*CLAIM_SHARED))
async def test_take_refuses_a_queue_key_of_another_type(env: Env, role: str, kind: str) -> None:
    for _ in range(2):
        await env.queued()
    await env.plant(key_of(role), kind)
    await refused(env, lambda: env.leases.take("worker-1", ["t-0", "t-1"]), key_of(role))


@pytest.mark.parametrize("kind", sorted(set(WRONG_TYPES) - {"hash"}))
async def test_take_refuses_a_job_key_of_another_type_naming_it(env: Env, kind: str) -> None:
    """A taken job's key is in no KEYS: the refusal names it all the same, and nothing
    is taken (no job waits in processing for the reaper)."""
    healthy, broken = await env.queued(), await env.queued()
    await env.plant(DINING.job(broken), kind)
    await refused(env, lambda: env.leases.take("worker-1", ["t-0", "t-1"]), DINING.job(broken))
    assert await env.raw.lrange(DINING.queue, 0, -1) == [broken, healthy]


async def test_take_refuses_a_marker_of_another_type(env: Env) -> None:
    await env.queued()
    marker = env.leases.take_marker("t-0")
    await env.plant(marker, "string")
    await refused(env, lambda: env.leases.take("worker-1", ["t-0"]), marker)


async def test_take_after_a_refusal_takes_every_job(env: Env) -> None:
    ids = [await env.queued() for _ in range(3)]
    await env.raw.hset(DINING.stats, "started", "many")
    with pytest.raises(CorruptQueueState):
        await env.leases.take("worker-1", ["t-0", "t-1", "t-2"])
    await env.raw.hdel(DINING.stats, "started")
    _, claims = await env.leases.take("worker-1", ["t-0", "t-1", "t-2"])
    assert [claim.job_id for claim in claims] == ids
    assert await env.counter("started") == "3"
