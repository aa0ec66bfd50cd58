"""One clock: every deadline a worker enforces comes from Redis TIME, so a worker whose
own clock is a minute off changes no outcome and no counter."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from platform_common.jobs import clock
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker

# No cleanup during the test: the endless job must be expired by its worker's TTL
# deadline, the clock under test, not by a sweep.
pytestmark = pytest.mark.queue(cleanup_interval=60)


def ttl_left(seconds: float, **overrides: Any) -> dict[str, Any]:
    created = datetime.now(UTC) - timedelta(seconds=60 - seconds)
    return make_job(created_at=created.isoformat(), ttl_seconds=60, **overrides)


@pytest.mark.parametrize("skew", [-60.0, 60.0], ids=["behind", "ahead"])
@pytest.mark.single_node("the worker's clock against Redis TIME, which a cluster serves alike")
async def test_a_skewed_worker_clock_changes_no_outcome_and_no_counter(
    queue: JobQueue, monkeypatch: pytest.MonkeyPatch, skew: float
) -> None:
    never = asyncio.Event()
    contexts: list[float] = []

    async def handler(job: JobPayload) -> str:
        kind = job.constraints["kind"]
        contexts.append(current_job().seconds_left())
        if kind == "flaky" and current_job().attempt == 1:
            raise RuntimeError("first attempt fails")
        if kind == "endless":
            await never.wait()
        await asyncio.sleep(0.3)
        return "done"

    plenty = make_job(constraints={"kind": "slow"})  # 60 s of TTL: must succeed
    flaky = make_job(constraints={"kind": "flaky"})  # must be retried once, then succeed
    # 2.5 s of TTL: enqueued and started in time on a loaded machine (the worker runs in
    # this process; Redis refuses a job already past its TTL), then it must expire at it.
    endless = ttl_left(2.5, constraints={"kind": "endless"})
    await queue.enqueue_many([plenty, flaky, endless])
    # Only now (the jobs were made with the true clock): the worker's
    # wall clock is `skew` seconds off, through the package's clock and time.time.
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)
    assert abs(clock.now() - real_time() - skew) < 1
    async with running_worker(queue.settings, handler) as worker:
        results = [
            await eventually(lambda job=job: queue.get_result(job["job_id"]))
            for job in (plenty, flaky, endless)
        ]
    assert [r.status for r in results] == ["succeeded", "succeeded", "expired"]
    counters = (await queue.stats("dining")).counters
    assert {k: counters[k] for k in ("started", "completed", "retried", "expired", "failed")} == {
        "started": 4, "completed": 2, "retried": 1, "expired": 1, "failed": 0,
    }  # fmt: skip
    assert worker.counts == {
        "succeeded": 2, "retrying": 1, "dead": 0, "failed": 0, "expired": 1, "released": 0,
        "lost": 0, "cancelled": 0,
    }  # fmt: skip
    # What a handler is told of its time left comes from Redis TIME too.
    assert all(0 < left <= 60 for left in contexts)
