"""A cancel racing each other ending of a running job (its completion, a retry, its last
attempt's dead letter, its expiry, the reaper) ends it in exactly one outcome: one
terminal counter moves by one, the stored result agrees with it, and a success is never
stored once the cancel was taken (its report said "cancelling"). The two calls go one
after the other, in each order, and together, many rounds each."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from platform_common.jobs.errors import LeaseLost
from platform_common.jobs.queue import CancelOutcome, CancelReport
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, TOKEN, Env

pytestmark = [
    faults.FAULT_QUEUE,
    pytest.mark.single_node("the scripts' order is Redis' own; the cluster adds nothing here"),
]

ROUNDS = 30
TERMINAL = ("completed", "failed", "expired", "cancelled")


async def counters(env: Env) -> dict[str, int]:
    values = await env.raw.hmget(DINING.stats, list(TERMINAL))
    return {name: int(value or 0) for name, value in zip(TERMINAL, values, strict=True)}


async def race(
    env: Env,
    prepare: Callable[[str], Awaitable[None]],
    other: Callable[[str], Awaitable[Any]],
    order: str,
) -> tuple[CancelReport, str, str]:
    """One round: a running job, prepared, then cancel and `other`: one after the other
    ("cancel first", "other first") or sent together ("together", in a random order).
    Returns the cancel's report, the terminal counter that moved, and the stored
    result's status (once the job has ended)."""
    job_id = (await env.running()).job_id
    await prepare(job_id)
    before = await counters(env)
    cancel: Any
    if order == "cancel first":
        cancel = await env.queue.cancel("dining", job_id, "race")
        await other(job_id)
    elif order == "other first":
        await other(job_id)
        cancel = await env.queue.cancel("dining", job_id, "race")
    else:
        calls = [env.queue.cancel("dining", job_id, "race"), other(job_id)]
        first = random.random() < 0.5
        replies = await asyncio.gather(*(calls if first else calls[::-1]))
        cancel = replies[0] if first else replies[1]
    assert isinstance(cancel, CancelReport), cancel
    # A job left waiting (a retry) by the other call is cancelled by a second cancel: the
    # outcome is then decided by the two writes that raced.
    if await env.raw.hget(DINING.job(job_id), "state") == "retrying":
        assert (await env.queue.cancel("dining", job_id)).outcome == CancelOutcome.CANCELLED
    # Whatever the worker does last, with its old token, changes nothing.
    with contextlib.suppress(LeaseLost):
        await env.leases.complete(job_id, TOKEN, '"late"')
    after = await counters(env)
    moved = [name for name in TERMINAL if after[name] != before[name]]
    assert len(moved) == 1 and after[moved[0]] == before[moved[0]] + 1, (before, after)
    text = await env.raw.get(DINING.result(job_id))
    assert text is not None
    status: str = json.loads(text)["status"]
    if cancel.outcome == CancelOutcome.CANCELLING:
        assert status != "succeeded"
    return cancel, moved[0], status


async def nothing(job_id: str) -> None:
    return None


@pytest.mark.parametrize("ending", ["complete", "retry", "last_attempt", "expiry", "reaper"])
async def test_a_cancel_racing_an_ending_has_exactly_one_outcome(env: Env, ending: str) -> None:
    async def last_attempt(job_id: str) -> None:
        await env.raw.hset(DINING.job(job_id), "max_attempts", "1")

    async def past_ttl(job_id: str) -> None:
        await env.raw.hset(DINING.job(job_id), "expires_at", "1")
        await env.raw.zadd(DINING.expiry, {job_id: 1})

    async def lease_lapsed(job_id: str) -> None:
        await env.raw.zadd(DINING.leases, {job_id: 0}, xx=True)

    async def complete(job_id: str) -> Any:
        return await env.leases.complete(job_id, TOKEN, '"done"')

    async def fail(job_id: str) -> Any:
        return await env.leases.fail(job_id, TOKEN, "boom")

    async def expire(job_id: str) -> Any:
        return await env.leases.expire([job_id])

    async def reap(job_id: str) -> Any:
        return await env.chores.reap()

    prepare, other, expected = {
        "complete": (nothing, complete, {("completed", "succeeded"), ("cancelled", "cancelled")}),
        "retry": (nothing, fail, {("cancelled", "cancelled")}),
        "last_attempt": (last_attempt, fail, {("failed", "failed"), ("cancelled", "cancelled")}),
        "expiry": (past_ttl, expire, {("expired", "expired")}),
        "reaper": (lease_lapsed, reap, {("cancelled", "cancelled")}),
    }[ending]
    seen: set[tuple[str, str]] = set()
    orders = ("cancel first", "other first", "together")
    for round_number in range(ROUNDS):
        _, moved, status = await race(env, prepare, other, orders[round_number % 3])
        seen.add((moved, status))
    # Both orders ran: every possible outcome was met.
    assert seen == expected, seen
    dead = await env.raw.llen(DINING.dead)
    assert dead == (await counters(env))["failed"]  # each failure here is a dead letter
