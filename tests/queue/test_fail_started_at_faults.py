"""A record's started_at that is no finite number ("inf", "nan", "1e999") never makes
`queue_fail.lua` fail after its first write: it went into the history entry as a Lua
number, and cjson refuses to encode an infinite one, after the lease (mode "lost") and
the stats had been written. Now the attempt ends whole, the history entry without it.
(The rest of queue_fail's faults are in test_script_faults.py.)"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import QueueState
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job

pytestmark = [
    pytest.mark.cluster_sample(planted=("started_at",)),
    pytest.mark.queue(max_attempts=2),
    pytest.mark.valkey,
]

DINING = QueueKeys("dining")
TOKEN = "token-1"


@dataclass
class Env(QueueEnv):
    async def running(self) -> str:
        job_id: str = await self.queue.enqueue(make_job())
        assert await self.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
        _, claims = await self.leases.claim("worker-1", [(job_id, TOKEN)])
        assert [claim.job_id for claim in claims] == [job_id]
        return job_id


@pytest.mark.parametrize("started_at", ["inf", "-inf", "nan", "1e999", "soon"])
@pytest.mark.parametrize("ended_by", ["worker", "reaper"])
async def test_an_attempt_whose_started_at_is_no_number_ends_whole(
    env: Env, started_at: str, ended_by: str
) -> None:
    job_id = await env.running()
    await env.raw.hset(DINING.job(job_id), "started_at", started_at)
    if ended_by == "worker":
        assert await env.leases.fail(job_id, TOKEN, "boom") == QueueState.RETRYING
    else:
        await env.raw.zadd(DINING.leases, {job_id: 0})  # the lease lapsed
        report = await env.chores.reap()
        assert (report.retried, report.dead) == (1, 0)
    record = await env.raw.hgetall(DINING.job(job_id))
    assert record["state"] == "retrying"
    assert ("token" in record) == (ended_by == "worker")  # the reaper fences the lost worker
    (entry,) = json.loads(record["history"])
    assert "started_at" not in entry and entry["attempt"] == 1
    assert await env.raw.zscore(DINING.delayed, job_id) is not None
    assert await env.raw.zscore(DINING.leases, job_id) is None
    assert await env.raw.lrange(DINING.processing, 0, -1) == []
    assert (await env.queue.stats("dining")).counters["retried"] == 1
