"""Pausing an agent type (JobQueue.pause / resume): once pause returns, no worker starts
a job of the type, and a job a worker's BLMOVE already took goes back where it was;
running jobs finish, enqueue still accepts, TTLs keep running; resume lets the workers
take again. Runs on a single node and on the cluster."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from platform_common.jobs.errors import ValidationError
from platform_common.jobs.queue import JobPayload, PauseState, current_job
from platform_common.jobs.worker.attempt_calls import TypePaused
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, Env
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, fast_settings, running_worker
from tests.support.stored_jobs import make_packed_due

pytestmark = faults.FAULT_QUEUE  # the `env` of tests/queue/conftest.py, as the fault tests make it

PAUSED_LINE = "agent type dining is paused"
RESUMED_LINE = "agent type dining resumed"


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


# -- the API -----------------------------------------------------------------------------
async def test_pause_and_resume_say_what_they_changed(env: Env) -> None:
    assert await env.queue.pause_state("dining") == PauseState("dining", False, None)
    first = await env.queue.pause("dining")
    assert (first.agent_type, first.paused, first.changed) == ("dining", True, True)
    assert first.since is not None
    seconds, _ = await env.raw.time()
    assert abs(first.since - int(seconds)) < 60  # Redis' clock, in seconds
    again = await env.queue.pause("dining")
    assert again == replace(first, changed=False)  # the first pause's moment stays
    assert await env.queue.pause_state("dining") == replace(first, changed=False)
    resumed = await env.queue.resume("dining")
    assert resumed == PauseState("dining", False, first.since, True)
    assert await env.queue.resume("dining") == PauseState("dining", False, None, False)
    assert not await env.raw.exists(DINING.paused)


@pytest.mark.parametrize("agent_type", ["lunch", "", "dining ", 5, None, ["dining"]])
async def test_pause_of_a_type_that_is_not_configured_is_refused(
    env: Env, agent_type: object
) -> None:
    before = await env.snapshot()
    for call in (env.queue.pause, env.queue.resume, env.queue.pause_state):
        with pytest.raises(ValidationError, match="unknown agent type"):
            await call(agent_type)  # type: ignore[arg-type]
    assert await env.snapshot() == before


async def test_enqueue_accepts_while_paused(env: Env) -> None:
    await env.queue.pause("dining")
    ids = [await env.queued() for _ in range(3)]
    assert await env.queue.enqueue_many([make_job() for _ in range(2)])
    stats = await env.queue.stats("dining")
    assert (stats.queued, stats.counters["enqueued"]) == (5, 5)
    assert await env.raw.lrange(DINING.queue, -3, -1) == ids[::-1]


# -- the claim ---------------------------------------------------------------------------
async def test_a_claim_while_paused_gives_back_what_blmove_took(env: Env) -> None:
    ids = [await env.queued() for _ in range(3)]
    await env.queue.pause("dining")
    before = await env.snapshot()
    taken = [await env.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") for _ in ids[:2]]
    assert taken == ids[:2]
    with pytest.raises(TypePaused):
        await env.leases.claim("worker-1", [(job_id, f"t-{job_id}") for job_id in taken])
    # As if the BLMOVEs had not run: the same list, in the same order, nothing claimed.
    assert await env.snapshot() == before
    assert await env.counter("started") is None


async def test_a_take_while_paused_takes_and_writes_nothing(env: Env) -> None:
    for _ in range(3):
        await env.queued()
    await env.queue.pause("dining")
    before = await env.snapshot()
    with pytest.raises(TypePaused):
        await env.leases.take("worker-1", ["t-0", "t-1"])
    assert await env.snapshot() == before


async def test_a_take_sent_again_while_paused_hands_back_what_it_took(env: Env) -> None:
    """The first run took the jobs (they run, under lease); its reply was lost and the
    type was paused meanwhile: the replay still hands them to their worker."""
    ids = [await env.queued() for _ in range(3)]
    _, first = await env.leases.take("worker-1", ["t-0", "t-1"])
    await env.queue.pause("dining")
    left, again = await env.leases.take("worker-1", ["t-0", "t-1"])
    assert [claim.job_id for claim in again] == [claim.job_id for claim in first] == ids[:2]
    assert left == 1


async def test_the_claim_runs_as_before_once_resumed(env: Env) -> None:
    ids = [await env.queued() for _ in range(2)]
    await env.queue.pause("dining")
    with pytest.raises(TypePaused):
        await env.leases.take("worker-1", ["t-0"])
    await env.queue.resume("dining")
    left, claims = await env.leases.take("worker-1", ["t-1", "t-2"])
    assert (left, [claim.job_id for claim in claims]) == (0, ids)


async def test_a_paused_job_still_expires_with_its_ttl(env: Env) -> None:
    job_id = await env.queued()
    await env.queue.pause("dining")
    await make_packed_due(env.raw, DINING, [job_id])
    assert await env.queue.cleanup("dining") == [job_id]
    result = await env.queue.get_result(job_id, "dining")
    assert result is not None and result.status == "expired"


# -- workers -----------------------------------------------------------------------------
async def test_a_worker_takes_nothing_while_paused_then_runs_everything(
    redis_url: str, env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platform_common.jobs.worker")
    await env.queue.pause("dining")
    ids = [await env.queued() for _ in range(3)]
    ran = RanJobs()
    async with running_worker(fast_settings(redis_url), ran):
        # Its first fetch (a BLMOVE) took a job and the claim gave it back.
        await eventually(lambda: asyncio.sleep(0, _lines(caplog, PAUSED_LINE)))
        assert ran.ran == []
        assert await env.counter("started") is None

        async def all_waiting() -> bool:
            # A paused worker re-asks each second (its BLMOVE moves a job into processing
            # and the claim gives it back): between two asks, every job waits on the queue.
            waiting = sorted(await env.raw.lrange(DINING.queue, 0, -1))
            return waiting == sorted(ids) and not await env.raw.exists(
                DINING.processing, DINING.leases
            )

        await eventually(all_waiting)
        await env.queue.resume("dining")
        await eventually(lambda: asyncio.sleep(0, len(ran.ran) == 3))
    assert sorted(ran.ran) == sorted(ids)
    assert (_lines(caplog, PAUSED_LINE), _lines(caplog, RESUMED_LINE)) == (1, 1)


async def test_running_jobs_finish_while_paused(
    redis_url: str, env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platform_common.jobs.worker")
    started = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    async def handler(job: JobPayload) -> str:
        ran.append(current_job().job_id)
        started.set()
        await release.wait()
        return "done"

    first = await env.queued()
    async with running_worker(fast_settings(redis_url), handler):
        await asyncio.wait_for(started.wait(), 20)
        await env.queue.pause("dining")
        second = await env.queued()
        await eventually(lambda: asyncio.sleep(0, _lines(caplog, PAUSED_LINE)))
        release.set()
        result = await eventually(lambda: env.queue.get_result(first, "dining"))
        assert result.ok and result.result == "done"
        assert ran == [first]
        assert await env.raw.lrange(DINING.queue, 0, -1) == [second]
        assert await env.counter("started") == "1"
