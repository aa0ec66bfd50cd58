"""Completions issued close together share one queue_complete call, and each keeps what a
call of its own gives it: its fencing, its outcome, its refusal, its counts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from platform_common.jobs.errors import CorruptQueueState, LeaseLost
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import AttemptOutcome, JobQueue
from platform_common.jobs.redis.script import Script
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls
from tests.support.queue_handlers import make_job

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(register=("dining",))


class CountedLeases(AttemptCalls):
    """AttemptCalls whose complete script calls are counted (how many calls, how many jobs)."""

    def __init__(self, queue: JobQueue) -> None:
        super().__init__(queue.connection, "dining")
        self.complete_calls: list[int] = []
        run = self._run

        async def counted(
            script: Script, keys: Sequence[str | bytes], args: list[Any], *, eager: bool = False
        ) -> Any:
            if script is self._scripts.complete:
                self.complete_calls.append((len(keys) - 4) // 2)
            return await run(script, keys, args, eager=eager)

        self._run = counted


async def running(
    queue: JobQueue, redis_client: RedisClient, leases: AttemptCalls, n: int
) -> list[str]:
    """n jobs taken and claimed, job i under token t<i>."""
    ids: list[str] = await queue.enqueue_many([make_job() for _ in range(n)])
    taken = [
        await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") for _ in ids
    ]
    _, claims = await leases.claim("w1", [(job_id, f"t{i}") for i, job_id in enumerate(taken)])
    assert len(claims) == n
    return taken


async def stats(redis_client: RedisClient) -> dict[str, str]:
    fields: dict[str, str] = await redis_client.hgetall(DINING.stats)
    return fields


def bucket_total(fields: dict[str, str], histogram: str) -> int:
    return sum(int(value) for name, value in fields.items() if name.startswith(f"{histogram}_le:"))


async def test_concurrent_completions_share_one_call_and_count_each_job(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = CountedLeases(queue)
    ids = await running(queue, redis_client, leases, 12)
    await asyncio.gather(
        *(leases.complete(job_id, f"t{i}", f'{{"n":{i}}}') for i, job_id in enumerate(ids))
    )
    assert leases.complete_calls == [12]
    for i, job_id in enumerate(ids):
        result = await queue.get_result(job_id, "dining")
        assert result is not None and result.ok and result.result == {"n": i}
        assert await redis_client.hget(DINING.job(job_id), "state") == "succeeded"
        assert 0 < await redis_client.ttl(DINING.job(job_id)) <= 60
    fields = await stats(redis_client)
    assert fields["completed"] == "12"
    for histogram in ("latency", "wait", "run"):
        assert fields[f"{histogram}_count"] == "12"
        assert bucket_total(fields, histogram) == 12
        assert float(fields[f"{histogram}_sum"]) >= 0
    assert await redis_client.llen(DINING.processing) == 0
    assert await redis_client.zcard(DINING.leases) == 0
    assert await redis_client.zcard(DINING.expiry) == 0


async def test_a_lone_completion_goes_out_alone(queue: JobQueue, redis_client: RedisClient) -> None:
    leases = CountedLeases(queue)
    [job_id] = await running(queue, redis_client, leases, 1)
    await leases.complete(job_id, "t0", "1")
    assert leases.complete_calls == [1]
    assert (await stats(redis_client))["completed"] == "1"


async def test_each_completion_of_a_batch_is_fenced_by_its_own_token(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = CountedLeases(queue)
    ids = await running(queue, redis_client, leases, 3)
    outcomes = await asyncio.gather(
        leases.complete(ids[0], "t0", "0"),
        leases.complete(ids[1], "someone-else", "1"),
        leases.complete(ids[2], "t2", "2"),
        return_exceptions=True,
    )
    assert leases.complete_calls == [3]
    assert outcomes[0] == outcomes[2] == AttemptOutcome.OK
    assert isinstance(outcomes[1], LeaseLost) and outcomes[1].job_id == ids[1]
    assert await redis_client.hget(DINING.job(ids[1]), "state") == "running"
    assert await redis_client.exists(DINING.result(ids[1])) == 0
    assert (await stats(redis_client))["completed"] == "2"


async def test_a_job_field_that_does_not_parse_refuses_only_its_own_completion(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = CountedLeases(queue)
    ids = await running(queue, redis_client, leases, 3)
    await redis_client.hset(DINING.job(ids[1]), "started_at", "later")
    record = await redis_client.hgetall(DINING.job(ids[1]))
    outcomes = await asyncio.gather(
        *(leases.complete(job_id, f"t{i}", "1") for i, job_id in enumerate(ids)),
        return_exceptions=True,
    )
    assert leases.complete_calls == [3]
    refusal = outcomes[1]
    assert isinstance(refusal, CorruptQueueState)
    assert refusal.key == DINING.job(ids[1]) and "started_at" in refusal.problem
    assert outcomes[0] == outcomes[2] == AttemptOutcome.OK
    assert await redis_client.hgetall(DINING.job(ids[1])) == record
    assert await redis_client.exists(DINING.result(ids[1])) == 0
    assert await redis_client.zscore(DINING.leases, ids[1]) is not None
    assert (await stats(redis_client))["completed"] == "2"


async def test_a_job_key_of_another_type_refuses_only_its_own_completion(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = CountedLeases(queue)
    ids = await running(queue, redis_client, leases, 2)
    await redis_client.delete(DINING.job(ids[0]))
    await redis_client.set(DINING.job(ids[0]), "not a job")
    outcomes = await asyncio.gather(
        leases.complete(ids[0], "t0", "1"), leases.complete(ids[1], "t1", "1"),
        return_exceptions=True,
    )  # fmt: skip
    refusal = outcomes[0]
    assert isinstance(refusal, CorruptQueueState) and refusal.key == DINING.job(ids[0])
    assert "holds a string" in refusal.problem
    assert outcomes[1] == AttemptOutcome.OK
    assert await redis_client.get(DINING.job(ids[0])) == "not a job"
    assert (await stats(redis_client))["completed"] == "1"


async def test_a_stats_field_one_job_would_bump_fails_that_job_alone(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    """The whole call is refused (nothing written), then each job is completed alone:
    only the job whose observation lands in the bad bucket is refused."""
    leases = CountedLeases(queue)
    ids = await running(queue, redis_client, leases, 3)
    # Job 0 lived for hours: its latency lands in +Inf, where no other job's does.
    enqueued = int(await redis_client.hget(DINING.job(ids[0]), "enqueued_at"))
    await redis_client.hset(DINING.job(ids[0]), "enqueued_at", str(enqueued - 10_000_000))
    await redis_client.hset(DINING.stats, "latency_le:+Inf", "many")
    outcomes = await asyncio.gather(
        *(leases.complete(job_id, f"t{i}", "1") for i, job_id in enumerate(ids)),
        return_exceptions=True,
    )
    assert leases.complete_calls == [3, 1, 1, 1]
    refusal = outcomes[0]
    assert isinstance(refusal, CorruptQueueState) and refusal.key == DINING.stats
    assert "latency_le:+Inf" in refusal.problem
    assert outcomes[1:] == [AttemptOutcome.OK, AttemptOutcome.OK]
    assert await redis_client.hget(DINING.job(ids[0]), "state") == "running"
    fields = await stats(redis_client)
    assert fields["completed"] == "2" and fields["latency_count"] == "2"


async def test_the_same_completion_twice_in_one_call_counts_once(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = CountedLeases(queue)
    [job_id] = await running(queue, redis_client, leases, 1)
    await asyncio.gather(leases.complete(job_id, "t0", "1"), leases.complete(job_id, "t0", "1"))
    assert leases.complete_calls == [2]
    fields = await stats(redis_client)
    assert fields["completed"] == "1" and fields["run_count"] == "1"
    assert bucket_total(fields, "run") == 1


async def test_a_batch_sent_again_after_a_lost_reply_is_a_replay(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    leases = AttemptCalls(queue.connection, "dining")
    ids = await running(queue, redis_client, leases, 3)
    jobs = [(job_id, f"t{i}", "1") for i, job_id in enumerate(ids)]
    keys, args = leases.complete_call(jobs)
    script = queue.connection.scripts.complete
    first = await queue.connection.run_script(script, keys, args)
    after_first = await stats(redis_client)
    again = await queue.connection.run_script(script, keys, args)
    assert first == [["ok"]] * 3 and again == [["replay"]] * 3
    assert await stats(redis_client) == after_first


async def test_completions_past_the_batch_bound_go_in_several_calls(
    queue: JobQueue, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("platform_common.jobs.worker.attempt_calls.MAX_COMPLETE_BATCH", 4)
    leases = CountedLeases(queue)
    ids = await running(queue, redis_client, leases, 10)
    await asyncio.gather(*(leases.complete(job_id, f"t{i}", "1") for i, job_id in enumerate(ids)))
    assert leases.complete_calls == [4, 4, 2]
    assert (await stats(redis_client))["completed"] == "10"
