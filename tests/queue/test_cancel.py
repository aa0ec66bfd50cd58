"""Cancelling jobs (JobQueue.cancel, cancel_session; lua/queue_cancel.lua) and the fence
that ends a cancel-requested attempt cancelled in the complete, fail and reaper scripts.
Runs on a single node and on the cluster (the scripts are multi-key, the event is
published)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from platform_common.jobs.errors import ValidationError
from platform_common.jobs.queue import CancelOutcome, CancelReport, QueueState
from platform_common.jobs.status import AttemptOutcome, JobStatus
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, TOKEN, Env
from tests.support.queue_handlers import make_job

pytestmark = faults.FAULT_QUEUE


def report(job_id: str, outcome: CancelOutcome, state: str | None = None) -> CancelReport:
    return CancelReport("dining", job_id, outcome, state)


async def stored_result(env: Env, job_id: str) -> dict[str, Any]:
    text = await env.raw.get(DINING.result(job_id))
    assert text is not None
    result: dict[str, Any] = json.loads(text)
    return result


async def assert_cancelled(env: Env, job_id: str, reason: str) -> None:
    assert await stored_result(env, job_id) == {
        "status": "cancelled",
        "result": None,
        "error": reason,
    }
    outcome = await env.queue.get_result(job_id, "dining")
    assert outcome is not None and outcome.status == QueueState.CANCELLED
    record = await env.queue.get_record("dining", job_id)
    assert record is not None and record.status == JobStatus.CANCELLED


# -- waiting jobs: cancelled at once, never started ----------------------------------------
async def test_a_queued_job_is_cancelled_and_never_starts(env: Env) -> None:
    job_id = await env.queued()
    other = await env.queued()
    async with env.queue.completions(watch=[("dining", job_id)]) as events:
        assert await env.queue.cancel("dining", job_id, "user left") == report(
            job_id, CancelOutcome.CANCELLED
        )
        event = await anext(events)
    assert event.result is not None
    assert event.result.job_id == job_id and event.result.status == QueueState.CANCELLED
    assert event.result.error == "user left"
    await assert_cancelled(env, job_id, "user left")
    assert not await env.raw.hexists(DINING.queued, job_id)
    assert await env.raw.hget(DINING.stats, "cancelled") == "1"
    assert (await env.queue.stats("dining")).queued == 1
    # The stale id on the queue list is dropped by the claim; the other job runs.
    _, claims = await env.leases.take("worker-1", ["t1", "t2"])
    assert [claim.job_id for claim in claims] == [other]
    assert await env.raw.llen(DINING.queue) == 0


async def test_a_delayed_retry_and_a_scheduled_job_are_cancelled(env: Env) -> None:
    retry = await env.due_retry()
    scheduled = await env.queue.enqueue(make_job(), delay=30)
    for job_id in (retry, scheduled):
        assert await env.queue.cancel("dining", job_id) == report(job_id, CancelOutcome.CANCELLED)
        await assert_cancelled(env, job_id, "cancelled")
        assert not await env.raw.exists(DINING.job(job_id))
        for zset in (DINING.delayed, DINING.expiry, DINING.waiting):
            assert await env.raw.zscore(zset, job_id) is None
    assert await env.chores.promote() == 0
    assert await env.raw.hget(DINING.stats, "cancelled") == "2"


# -- running jobs: requested, then fenced -----------------------------------------------------
async def test_a_running_job_is_asked_and_its_success_is_never_stored(env: Env) -> None:
    claim = await env.running()
    assert await env.queue.cancel("dining", claim.job_id, "stop") == report(
        claim.job_id, CancelOutcome.CANCELLING
    )
    assert await env.raw.hgetall(DINING.cancels) == {claim.job_id: "stop"}
    assert await env.raw.hget(DINING.job(claim.job_id), "cancel") is None  # no job hash field
    entries = await env.raw.xrange(DINING.control)
    assert [fields for _, fields in entries] == [{"job": claim.job_id, "reason": "stop"}]
    # Asked again: the same answer, nothing written again.
    before = await env.snapshot()
    again = await env.queue.cancel("dining", claim.job_id, "other")
    assert again.outcome == CancelOutcome.CANCELLING
    assert await env.snapshot() == before
    assert await env.leases.complete(claim.job_id, TOKEN, '"done"') == AttemptOutcome.CANCELLED
    await assert_cancelled(env, claim.job_id, "stop")
    assert not await env.raw.exists(DINING.cancels)  # the settled request is deleted
    assert await env.raw.hget(DINING.stats, "completed") is None
    assert await env.raw.hget(DINING.stats, "cancelled") == "1"
    assert await env.raw.llen(DINING.processing) == 0
    assert await env.raw.zscore(DINING.leases, claim.job_id) is None
    # The complete sent again (a lost reply) says the same; then it has finished.
    assert await env.leases.complete(claim.job_id, TOKEN, '"done"') == AttemptOutcome.CANCELLED
    assert await env.queue.cancel("dining", claim.job_id) == report(
        claim.job_id, CancelOutcome.FINISHED, "cancelled"
    )


@pytest.mark.parametrize("mode", ["error", "fatal", "corrupt", "release"])
async def test_a_failing_requested_attempt_ends_cancelled(env: Env, mode: str) -> None:
    """No retry, no dead letter, no failure: every mode of the fail script."""
    claim = await env.running()
    await env.queue.cancel("dining", claim.job_id, "stop")
    assert await env.leases.fail(claim.job_id, TOKEN, "boom", mode=mode) == (
        AttemptOutcome.CANCELLED
    )
    await assert_cancelled(env, claim.job_id, "stop")
    assert not await env.raw.exists(DINING.cancels)  # the settled request is deleted
    for field in ("retried", "failed", "dead_lettered"):
        assert await env.raw.hget(DINING.stats, field) is None
    assert await env.raw.llen(DINING.dead) == 0 and await env.raw.zcard(DINING.delayed) == 0
    assert await env.raw.llen(DINING.queue) == 0


async def test_the_reaper_ends_a_requested_job_cancelled(env: Env) -> None:
    claim = await env.running()
    await env.queue.cancel("dining", claim.job_id)
    await env.raw.zadd(DINING.leases, {claim.job_id: 0}, xx=True)  # its worker died
    reaped = await env.chores.reap()
    assert [job_id for job_id, _ in reaped.cancelled] == [claim.job_id]
    assert not await env.raw.exists(DINING.cancels)
    assert reaped.retried == reaped.dead == 0
    await assert_cancelled(env, claim.job_id, "cancelled")
    assert await env.raw.llen(DINING.queue) == 0
    assert await env.raw.hget(DINING.stats, "retried") is None


async def test_a_requested_job_expired_by_its_ttl_leaves_no_request(env: Env) -> None:
    """Its request is settled with it: kept, it would cancel a later job given its id."""
    claim = await env.running()
    await env.queue.cancel("dining", claim.job_id)
    await env.raw.hset(DINING.job(claim.job_id), "expires_at", "1")
    await env.raw.zadd(DINING.expiry, {claim.job_id: 1})
    await env.queue.cleanup("dining")
    assert await env.raw.hget(DINING.job(claim.job_id), "state") is None  # expired, gone
    assert not await env.raw.exists(DINING.cancels)


# -- what is not there, and hostile input -------------------------------------------------------
async def test_finished_and_unknown_jobs_are_reported_and_left_alone(env: Env) -> None:
    claim = await env.running()
    await env.leases.complete(claim.job_id, TOKEN, "1")
    before = await env.snapshot()
    assert await env.queue.cancel("dining", claim.job_id) == report(
        claim.job_id, CancelOutcome.FINISHED, "succeeded"
    )
    assert await env.queue.cancel("dining", "no-such-job") == report(
        "no-such-job", CancelOutcome.UNKNOWN
    )
    assert await env.snapshot() == before


async def test_a_job_cancelled_twice_is_cancelled_once(env: Env) -> None:
    job_id = await env.queued()
    await env.queue.cancel("dining", job_id, "first")
    assert await env.queue.cancel("dining", job_id, "second") == report(
        job_id, CancelOutcome.FINISHED, "cancelled"
    )
    await assert_cancelled(env, job_id, "first")
    assert await env.raw.hget(DINING.stats, "cancelled") == "1"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (("dining", 5), "job_id"),
        (("dining", ""), "job_id"),
        (("dining", "x" * 201), "job_id"),
        (("dining", "a b"), "job_id"),
        (("dining", "ok", "r" * 1001), "reason"),
        (("dining", "ok", 7), "reason"),
        (("dining", "ok", "\ud800"), "reason"),
        (("lunch", "ok"), "agent_type"),
        ((None, "ok"), "agent_type"),
    ],
)
async def test_bad_input_is_refused_by_name(env: Env, call: tuple[Any, ...], field: str) -> None:
    before = await env.snapshot()
    with pytest.raises(ValidationError) as info:
        await env.queue.cancel(*call)
    assert info.value.field == field
    assert await env.snapshot() == before


async def test_a_long_unicode_reason_is_kept_whole(env: Env) -> None:
    job_id = await env.queued()
    reason = "ça s'arrête ✋ " * 70 + '"/\\'
    reason = reason[:1000]
    await env.queue.cancel("dining", job_id, reason)
    await assert_cancelled(env, job_id, reason)


@pytest.mark.parametrize("session_id", ["", 5, "s" * 201, None])
async def test_a_bad_session_id_is_refused(env: Env, session_id: Any) -> None:
    with pytest.raises(ValidationError) as info:
        await env.queue.cancel_session(session_id)
    assert info.value.field == "session_id"


# -- sessions: cancel_session finds a session's live jobs where they are -----------------------
SESSION = "0b7e6f4a-session"  # make_job's


async def test_cancel_session_cancels_every_live_job_of_the_session(env: Env) -> None:
    running = (await env.running()).job_id
    retry = await env.due_retry()
    queued = await env.queued()
    scheduled = await env.queue.enqueue(make_job(), delay=30)
    [other] = await env.queue.enqueue_many([make_job(session_id="another")])
    reports = await env.queue.cancel_session(SESSION, "session closed")
    assert sorted(reports, key=lambda r: r.job_id) == sorted(
        [
            report(running, CancelOutcome.CANCELLING),
            report(queued, CancelOutcome.CANCELLED),
            report(scheduled, CancelOutcome.CANCELLED),
            report(retry, CancelOutcome.CANCELLED),
        ],
        key=lambda r: r.job_id,
    )
    for job_id in (queued, scheduled, retry):
        await assert_cancelled(env, job_id, "session closed")
    assert await env.raw.hexists(DINING.queued, other)
    # Twice: the running one is still being cancelled, nothing else is found.
    again = await env.queue.cancel_session(SESSION)
    assert again == [report(running, CancelOutcome.CANCELLING)]
    assert await env.queue.cancel_session("nobody") == []


async def test_cancel_session_walks_more_than_one_page(env: Env) -> None:
    """More waiting jobs than one scan step reads (SCAN_COUNT is a hint: a hash this big
    is no longer a listpack, so each step returns about that many)."""
    ids = await env.queue.enqueue_many([make_job(session_id="big") for _ in range(1500)])
    await env.queue.enqueue_many([make_job(session_id="other") for _ in range(300)])
    reports = await env.queue.cancel_session("big")
    assert sorted(r.job_id for r in reports) == sorted(ids)
    assert (await env.queue.stats("dining")).queued == 300


async def test_the_session_id_must_be_the_payloads_own(env: Env) -> None:
    """A payload holding the session id elsewhere (a constraint's value) is not the
    session's; a session id with quotes and unicode is matched as stored."""
    decoy = await env.queue.enqueue(
        make_job(session_id="s2", constraints={"note": '"session_id":"s"'})
    )
    mine = await env.queue.enqueue(make_job(session_id="s"))
    odd = await env.queue.enqueue(make_job(session_id='ça "va" ✋'))
    assert await env.queue.cancel_session("s") == [report(mine, CancelOutcome.CANCELLED)]
    assert await env.queue.cancel_session('ça "va" ✋') == [report(odd, CancelOutcome.CANCELLED)]
    assert await env.raw.hexists(DINING.queued, decoy)
