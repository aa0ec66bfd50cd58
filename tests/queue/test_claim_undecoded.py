"""The claim script returns payloads and trace contexts unchecked; the worker decodes
each (worker/attempt_calls.py): a payload that is not UTF-8 holds only its own job as corrupt,
a trace context that is not is dropped, and the claim's other jobs run."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient, RedisSettings
from platform_common.jobs.worker import AttemptCalls
from platform_common.jobs.worker.attempt_calls import PAYLOAD_NOT_UTF8
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import fast_settings
from tests.support.stored_jobs import to_job_hash

DINING = QueueKeys("dining")


@pytest.fixture
async def setup(redis_url: str) -> AsyncIterator[tuple[JobQueue, AttemptCalls, RedisClient]]:
    settings = fast_settings(redis_url)
    raw: RedisClient = (
        RedisSettings.from_url(redis_url).make_client()
        if settings.redis.cluster
        else aioredis.Redis.from_url(redis_url, decode_responses=True)
    )
    queue = await JobQueue.connect(settings)
    try:
        yield queue, AttemptCalls(queue.connection, "dining"), raw
    finally:
        await queue.aclose()
        await raw.aclose()


async def take(raw: RedisClient, count: int) -> None:
    for _ in range(count):
        assert await raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") is not None


@pytest.mark.parametrize("layout", ["packed", "job hash"])
async def test_one_bad_payload_or_trace_context_costs_only_its_own_job(
    setup: tuple[JobQueue, AttemptCalls, RedisClient], layout: str
) -> None:
    queue, leases, raw = setup
    healthy, bad_payload, bad_trace = (make_job(task=f"job {i}") for i in range(3))
    await queue.enqueue_many([healthy, bad_payload, bad_trace])
    ids = [job["job_id"] for job in (healthy, bad_payload, bad_trace)]
    for job_id, field, value in [
        (ids[1], "payload", b"\xff\xfe{"),
        (ids[2], "trace_context", b"00-\xc3-trace"),
    ]:
        if layout == "packed":
            header, trace, payload = (await raw.hget(DINING.queued, job_id)).split("\n", 2)
            parts = [header.encode(), trace.encode(), payload.encode()]
            parts[1 if field == "trace_context" else 2] = value
            await raw.hset(DINING.queued, job_id, b"\n".join(parts))  # type: ignore[arg-type]
        else:
            await to_job_hash(raw, DINING, job_id)
            await raw.hset(DINING.job(job_id), field, value)  # type: ignore[arg-type]
    await take(raw, 3)
    tokens = [(job_id, f"token-{i}") for i, job_id in enumerate(ids)]

    _, claims = await leases.claim("worker-1", tokens)
    by_id = {claim.job_id: claim for claim in claims}
    assert sorted(by_id) == sorted(ids)
    assert by_id[ids[0]].problem is None and by_id[ids[0]].attempt == 1
    assert by_id[ids[1]].problem == PAYLOAD_NOT_UTF8
    assert by_id[ids[2]].problem is None and by_id[ids[2]].trace_context is None
    assert '"task":"job 2"' in by_id[ids[2]].payload
    for job_id, token in tokens:  # held as a run is: running, leased, counted started
        assert await raw.hmget(DINING.job(job_id), ["state", "token", "attempts"]) == [
            "running", token, "1",
        ]  # fmt: skip
        assert await raw.zscore(DINING.leases, job_id) is not None
    assert await raw.hget(DINING.stats, "started") == "3"

    # A replay of the claim (its reply lost) hands back the same claims.
    _, again = await leases.claim("worker-1", tokens)
    assert {claim.job_id: claim.problem for claim in again} == {
        job_id: claim.problem for job_id, claim in by_id.items()
    }
    assert await raw.hget(DINING.stats, "started") == "3"

    assert await leases.fail(ids[1], "token-1", PAYLOAD_NOT_UTF8, mode="corrupt") == "dead"
    outcome = await queue.get_result(ids[1], "dining")
    assert outcome is not None and outcome.status == "failed"
    assert PAYLOAD_NOT_UTF8 in (outcome.error or "")
