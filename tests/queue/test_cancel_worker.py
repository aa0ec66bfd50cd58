"""A running job's cancel reaches its worker (worker/cancel_watch.py): an async handler's
task is cancelled, a sync handler sees current_job().cancel_requested; whatever either
returns afterwards, the job ends cancelled, counted, logged once and never stored as a
success. Single node and cluster: the worker reads the control stream through the
cluster client there."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from platform_common.jobs.queue import CancelOutcome, JobPayload, QueueState, current_job
from tests.queue import test_script_faults as faults
from tests.queue.test_script_faults import DINING, Env
from tests.support.queue_runtime import eventually, fast_settings, running_worker

pytestmark = faults.FAULT_QUEUE

LINE = "cancelled job="


async def cancelled_result(env: Env, job_id: str) -> None:
    result = await eventually(lambda: env.queue.get_result(job_id, "dining"))
    assert result.status == QueueState.CANCELLED and result.result is None
    assert result.error == "user left"


async def test_an_async_handler_is_cancelled_and_its_value_dropped(
    env: Env, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    started = asyncio.Event()
    saw_cancel = asyncio.Event()

    async def handler(job: JobPayload) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            saw_cancel.set()
            return "a value after the cancel"  # swallowed: never stored
        return "unreachable"

    caplog.set_level(logging.INFO, "platform_common.jobs.worker")
    async with running_worker(fast_settings(redis_url), handler) as worker:
        job_id = await env.queued()
        await asyncio.wait_for(started.wait(), 20)
        report = await env.queue.cancel("dining", job_id, "user left")
        assert report.outcome == CancelOutcome.CANCELLING
        await asyncio.wait_for(saw_cancel.wait(), 20)
        await cancelled_result(env, job_id)
        await eventually(lambda: asyncio.sleep(0, worker.counts["cancelled"] == 1))
    assert worker.counts["succeeded"] == 0
    assert await env.counter("cancelled") == "1" and await env.counter("completed") is None
    lines = [r for r in caplog.records if LINE in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "user left" in lines[0].getMessage()


@pytest.mark.single_node("the control stream is read as in the async test; this is the thread")
async def test_a_sync_handler_sees_cancel_requested(env: Env, redis_url: str) -> None:
    started = threading.Event()
    seen: list[bool] = []

    def handler(job: JobPayload) -> str:
        started.set()
        seen.append(current_job().cancel_requested.wait(20))
        return "finished anyway"

    async with running_worker(fast_settings(redis_url), handler) as worker:
        job_id = await env.queued()
        await asyncio.to_thread(started.wait, 20)
        await env.queue.cancel("dining", job_id, "user left")
        await cancelled_result(env, job_id)
        await eventually(lambda: asyncio.sleep(0, seen == [True]))
        await eventually(lambda: asyncio.sleep(0, worker.counts["cancelled"] == 1))
    assert await env.raw.hget(DINING.job(job_id), "state") == "cancelled"
    assert await env.counter("completed") is None
