"""A handler's result is bounded like a payload (max_result_bytes, QUEUE_MAX_RESULT_BYTES):
one over the limit fails its job for good, with an error naming the limit, and is never
stored."""

from __future__ import annotations

import pytest

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, QueueSettings
from platform_common.jobs.queue.queue_settings import MAX_PAYLOAD_BYTES
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
LIMIT = 64


async def test_a_result_one_byte_over_the_limit_fails_the_job_for_good(
    redis_url: str, redis_client: RedisClient
) -> None:
    """Defect: a handler's 100 MB result was stored in Redis. Its encoding is measured in
    the worker before the complete script; one byte over fails the attempt, not retried
    (the same result would come back), counted and kept on the failed list."""
    settings = fast_settings(redis_url, max_result_bytes=LIMIT)
    calls: list[str] = []

    async def handler(job: JobPayload) -> str:
        calls.append(job.task)
        # Stored as JSON text: the quotes count, so LIMIT - 2 characters fit exactly.
        return "x" * (LIMIT - 2 + (job.task == "over"))

    fits, over = make_job(task="fits"), make_job(task="over")
    queue = await JobQueue.connect(settings)
    try:
        await queue.enqueue_many([fits, over])
        async with running_worker(settings, handler) as worker:
            stored = await eventually(lambda: queue.get_result(fits["job_id"]))
            refused = await eventually(lambda: queue.get_result(over["job_id"]))
        assert stored.ok and stored.result == "x" * (LIMIT - 2)
        assert refused.status == "failed" and refused.result is None
        assert refused.error == (
            f"ResultTooLarge: result is {LIMIT + 1} bytes encoded, over the limit of {LIMIT} "
            "(QUEUE_MAX_RESULT_BYTES)"
        )
        assert "x" * (LIMIT - 1) not in await redis_client.get(DINING.result(over["job_id"]))
        assert sorted(calls) == ["fits", "over"]  # not retried
        assert (worker.counts["succeeded"], worker.counts["failed"]) == (1, 1)
        counters = (await queue.stats("dining")).counters
        assert {k: counters[k] for k in ("completed", "failed", "retried", "dead_lettered")} == {
            "completed": 1, "failed": 1, "retried": 0, "dead_lettered": 0,
        }  # fmt: skip
        assert await redis_client.hget(DINING.stats, "error:ResultTooLarge") == "1"
        kept = await queue.failed_jobs.list("dining")
        assert [(d.job_id, d.last_error) for d in kept] == [(over["job_id"], refused.error)]
    finally:
        await queue.aclose()


def test_max_result_bytes_is_a_bounded_setting() -> None:
    assert QueueSettings().max_result_bytes == 1 << 20
    assert QueueSettings.from_env({"QUEUE_MAX_RESULT_BYTES": "4096"}).max_result_bytes == 4096
    for bad in ("0", str(MAX_PAYLOAD_BYTES + 1)):
        with pytest.raises(ConfigurationError) as caught:
            QueueSettings.from_env({"QUEUE_MAX_RESULT_BYTES": bad})
        assert "QUEUE_MAX_RESULT_BYTES" in str(caught.value)
