"""Dead letters: list them with their history, requeue them (fresh attempts and TTL,
counted as enqueued), purge them (record and result gone)."""

from __future__ import annotations

import pytest

from platform_common.jobs.errors import InvalidPayload, ValidationError
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, NonRetryableError, current_job
from platform_common.jobs.redis.url import RedisClient
from tests.support.planted import plant_dead_letters
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, running_worker
from tests.support.sync_redis import sync_reply
from tests.support.worker_records import SyncClient

DINING = QueueKeys("dining")
pytestmark = pytest.mark.queue(max_attempts=1)


async def fails_first_life(job: JobPayload) -> str:
    """Fails unless the payload was fixed (constraints.fixed), as an operator would
    fix the cause before requeueing a dead letter."""
    if job.constraints.get("fixed") != "yes" and job.task.startswith("broken"):
        raise RuntimeError(f"{job.task} failed on attempt {current_job().attempt}")
    return "fine"


async def dead_letter(queue: JobQueue, count: int) -> list[str]:
    jobs = [make_job(task=f"broken {i}") for i in range(count)]
    ids = await queue.enqueue_many(jobs)
    async with running_worker(queue.settings, fails_first_life):
        await eventually(lambda: _dead_count(queue, count))
    return ids


async def _dead_count(queue: JobQueue, count: int) -> bool:
    return await queue.dead_letters.count("dining") == count


async def test_list_shows_payload_error_and_history_newest_first(queue: JobQueue) -> None:
    ids = await dead_letter(queue, 3)
    letters = await queue.dead_letters.list("dining")
    assert {d.job_id for d in letters} == set(ids)
    assert [d.dead_at for d in letters] == sorted((d.dead_at for d in letters), reverse=True)
    first = next(d for d in letters if d.job_id == ids[0])
    assert first.payload["task"] == "broken 0" and first.attempts == 1
    assert first.last_error == "RuntimeError: broken 0 failed on attempt 1"
    assert [(h["attempt"], h["outcome"]) for h in first.history] == [(1, "error")]
    assert [d.job_id for d in await queue.dead_letters.list("dining", start=1, count=1)] == [
        letters[1].job_id
    ]


async def test_requeue_runs_the_job_again_with_fresh_attempts(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    ids = await dead_letter(queue, 2)
    # Fix the cause (here: the stored payload), then requeue one of the two.
    key = DINING.job(ids[0])
    payload = (await redis_client.hget(key, "payload")).replace(
        '"max_price_per_person":200', '"max_price_per_person":200,"fixed":"yes"'
    )
    await redis_client.hset(key, "payload", payload)
    assert await queue.dead_letters.requeue("dining", [ids[0], "not-a-dead-letter"]) == [ids[0]]
    assert await redis_client.lrange(DINING.dead, 0, -1) == [ids[1]]
    assert await queue.get_result(ids[0]) is None  # the failed result is gone
    async with running_worker(queue.settings, fails_first_life):
        outcome = await eventually(lambda: queue.get_result(ids[0]))
    assert outcome.ok and outcome.result == "fine"
    stats = await queue.stats("dining")
    assert stats.counters["enqueued"] == 3 and stats.counters["completed"] == 1
    assert stats.dead == 1


async def test_purge_deletes_dead_letters_for_good(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    ids = await dead_letter(queue, 3)
    assert await queue.dead_letters.purge("dining", [ids[0]]) == 1
    assert not await redis_client.exists(DINING.job(ids[0]), DINING.result(ids[0]))
    assert await queue.dead_letters.count("dining") == 2
    assert await queue.dead_letters.purge("dining") == 2
    assert await queue.dead_letters.count("dining") == 0
    assert not await redis_client.exists(*(DINING.job(i) for i in ids))
    assert await queue.dead_letters.purge("dining") == 0


async def test_purge_counts_only_what_it_purged(queue: JobQueue) -> None:
    ids = await dead_letter(queue, 1)
    assert await queue.dead_letters.purge("dining", ["never-existed", "nor-this"]) == 0
    assert await queue.dead_letters.purge("dining", [ids[0], ids[0], "never-existed"]) == 1
    assert await queue.dead_letters.count("dining") == 0


@pytest.mark.parametrize("action", ["requeue", "purge"])
async def test_a_new_job_that_took_the_id_of_an_expired_letter_is_left_alone(
    queue: JobQueue, redis_client: RedisClient, action: str
) -> None:
    # The letter's record and result passed their retention; until the cleanup prunes
    # its entry, the id is free and a new job takes it. The stale entry goes, the new
    # job stays as it is (it was purged or reset to attempt 0 before).
    (job_id,) = await dead_letter(queue, 1)
    await redis_client.delete(DINING.job(job_id), DINING.result(job_id))
    await queue.enqueue(make_job(job_id=job_id, task="a new job"))
    await redis_client.hset(DINING.job(job_id), mapping={"state": "retrying", "attempts": "2"})
    letters = queue.dead_letters
    each = letters.requeue_each if action == "requeue" else letters.purge_each
    outcome = await each("dining", [job_id])
    assert (outcome.done, outcome.gone, outcome.newer) == ((), (job_id,), ())
    assert await letters.count("dining") == 0
    state = await redis_client.hmget(DINING.job(job_id), ["state", "attempts"])
    assert state == ["retrying", "2"]


@pytest.mark.parametrize("action", ["requeue", "purge"])
async def test_a_letter_that_ended_after_the_moment_given_is_left_alone(
    queue: JobQueue, redis_client: RedisClient, action: str
) -> None:
    older, newer = await dead_letter(queue, 2)
    await redis_client.hset(DINING.job(older), "finished_at", "1700000000000")
    await redis_client.hset(DINING.job(newer), "finished_at", "1700000000001")
    letters = queue.dead_letters
    each = letters.requeue_each if action == "requeue" else letters.purge_each
    outcome = await each("dining", [older, newer], as_of=1700000000000)
    assert (outcome.done, outcome.gone, outcome.newer) == ((older,), (), (newer,))
    assert await redis_client.lrange(DINING.dead, 0, -1) == [newer]
    assert await redis_client.hget(DINING.job(newer), "state") == "dead"


async def test_a_misspelt_agent_type_is_an_error_everywhere(queue: JobQueue) -> None:
    dead = queue.dead_letters
    operations = [
        dead.count("dinning"),
        dead.list("dinning"),
        dead.requeue("dinning"),
        dead.purge("dinning", ["x"]),
    ]
    for operation in operations:
        with pytest.raises(ValidationError) as caught:
            await operation
        assert caught.value.field == "agent_type"
        assert "unknown agent type 'dinning'; known: dining, dmc" in str(caught.value)
    with pytest.raises(InvalidPayload) as refused:
        await queue.enqueue(make_job(agent_type="dinning"))
    assert refused.value.errors["agent_type"] == caught.value.problem  # the same words


async def test_stats_and_records_of_a_misspelt_agent_type_are_an_error(queue: JobQueue) -> None:
    for operation in (
        queue.stats("dinning"),
        queue.get_record("dinning", "job-1"),
        queue.failed_jobs.count("dinning"),
        queue.failed_jobs.list("dinning"),
        queue.failed_jobs.purge("dinning"),
    ):
        with pytest.raises(ValidationError) as caught:
            await operation
        assert "unknown agent type 'dinning'; known: dining, dmc" in str(caught.value)


async def test_failed_jobs_verbs_return_what_they_did(queue: JobQueue) -> None:
    ids = await queue.enqueue_many([make_job(task=f"fatal {i}") for i in range(2)])

    async def refuses(job: JobPayload) -> str:
        raise NonRetryableError(job.task)

    async with running_worker(queue.settings, refuses):
        await eventually(lambda: _failed_count(queue, 2))
    failed = queue.failed_jobs
    assert await failed.purge("dining", ["never-existed", "nor-this"]) == 0
    assert await failed.requeue("dining", ["never-existed"]) == []
    assert await queue.dead_letters.purge("dining", ids) == 0  # not in the dead list
    assert await failed.purge("dining", [ids[0], ids[0]]) == 1
    assert await failed.requeue("dining", [ids[1], ids[0]]) == [ids[1]]
    assert await failed.count("dining") == 0


async def _failed_count(queue: JobQueue, count: int) -> bool:
    return await queue.failed_jobs.count("dining") == count


async def test_a_dead_letter_whose_stored_payload_does_not_parse_is_still_listed(
    queue: JobQueue, redis_client: RedisClient
) -> None:
    (job_id,) = await dead_letter(queue, 1)
    await redis_client.hset(DINING.job(job_id), "payload", "{not json")
    (letter,) = await queue.dead_letters.list("dining")
    assert (letter.job_id, letter.payload) == (job_id, {})
    assert letter.last_error == "RuntimeError: broken 0 failed on attempt 1"


async def test_a_letter_whose_id_or_error_is_not_utf8_is_listed_and_requeued(
    queue: JobQueue, client: SyncClient
) -> None:
    [sound] = plant_dead_letters(client, DINING, 1, lambda n: "e")
    binary = b"caf\xe9-1"
    fields = sync_reply(client.hgetall(DINING.job(sound)))
    fields["last_error"] = "bad byte"
    # A decoding client still writes bytes as they are.
    client.execute_command("HSET", DINING.job("").encode() + binary, *sum(fields.items(), ()))  # type: ignore[no-untyped-call]
    client.execute_command("HSET", DINING.job("").encode() + binary, "last_error", b"\xff oops")  # type: ignore[no-untyped-call]
    client.lpush(DINING.dead, binary)
    letters = await queue.dead_letters.list("dining")
    assert [d.job_id for d in letters] == [binary.decode("utf-8", "surrogateescape"), sound]
    assert letters[0].last_error == "\\xff oops" and letters[1].last_error == "e"
    assert await queue.dead_letters.requeue("dining", [letters[0].job_id]) == [letters[0].job_id]
    assert client.lrange(DINING.dead, 0, -1) == [sound]
