"""A requeue or purge acts on the dead letters its selection counted, never on letters
dead-lettered after it: the selection keeps its moment (the newest counted letter's
dead-lettered time, and that letter's id), the scripts leave anything newer alone, and
the report says what was skipped. Against real Redis (single node and cluster), with a
real worker dead-lettering in between, as the CLI runs it (select, ask, act)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.operations import (
    DeadSelection,
    purge_dead_letters,
    requeue_dead_letters,
    select_dead_letters,
)
from platform_common.jobs.queue import JobQueue
from tests.support.backends import CLUSTER, parametrize_backends
from tests.support.dead_letter_race import make_dead_letters, meanwhile
from tests.support.planted import plant_dead_letters
from tests.support.queue_runtime import fast_settings
from tests.support.sync_redis import sync_reply
from tests.support.worker_records import SyncClient, sync_client

DINING = QueueKeys("dining")
SINGLE = "single"
ACTIONS = {"requeue": requeue_dead_letters, "purge": purge_dead_letters}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc, "redis_backend", (SINGLE, CLUSTER))


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
def redis_url(redis_backend: str, request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(
        "cluster_url" if redis_backend == CLUSTER else "single_node_url"
    )
    return url


@pytest.fixture
def client(redis_url: str) -> Iterator[SyncClient]:
    yield from sync_client(redis_url)


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[JobQueue]:
    async with await JobQueue.connect(fast_settings(redis_url, max_attempts=1)) as opened:
        yield opened


async def select(queue: JobQueue, kind: str, shown: list[str]) -> DeadSelection:
    options: dict[str, dict[str, Any]] = {
        "all": {"every": True},
        "error-matches": {"error_matches": "TimeoutError"},
        "ids": {"job_ids": shown},
    }
    return await select_dead_letters(queue, "dining", **options[kind])


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("kind", ["all", "error-matches", "ids"])
async def test_letters_dead_lettered_after_the_selection_are_left_alone(
    queue: JobQueue, client: SyncClient, action: str, kind: str
) -> None:
    shown = await make_dead_letters(queue, [f"TimeoutError {n}" for n in range(5)])
    selection = await select(queue, kind, shown)
    assert selection.count == 5
    # Between the count and the action: two of the five are requeued and fail again,
    # three new jobs are dead-lettered, every error matching the selection's.
    new = await meanwhile(queue, shown[:2], [f"TimeoutError new {n}" for n in range(3)])
    report = await ACTIONS[action](queue, selection)
    assert set(sync_reply(client.lrange(DINING.dead, 0, -1))) == {*shown[:2], *new}
    acted = shown[2:]
    if action == "requeue":  # waiting again: on the queue, its record without a state
        assert set(acted) <= set(sync_reply(client.lrange(DINING.queue, 0, -1)))
        assert all(client.exists(DINING.job(j)) for j in acted)
        assert {client.hget(DINING.job(j), "state") for j in acted} == {None}
    else:  # purged: no record left
        assert not any(client.exists(DINING.job(j)) for j in acted)
    assert (report.selected, report.done, report.gone) == (5, 3, 2)
    # Every one of the five left was seen and left alone when acting on every letter;
    # a selection of ids sees only the two ids it holds, dead-lettered again since.
    assert report.newer == (5 if kind == "all" else 2)
    assert set(report.sample) == set(shown[2:])


@pytest.mark.parametrize("action", sorted(ACTIONS))
async def test_every_letter_stops_at_the_newest_counted_even_in_the_same_millisecond(
    queue: JobQueue, client: SyncClient, action: str
) -> None:
    # Letters of one millisecond (a poison storm fills one ms with many): the moment
    # alone cannot tell them apart, the newest counted letter's place in the list can.
    counted = plant_dead_letters(client, DINING, 3, lambda n: "e", prefix="counted")
    for job_id in counted:
        client.hset(DINING.job(job_id), "finished_at", "1700000005000")
    selection = await select_dead_letters(queue, "dining", every=True)
    assert (selection.count, selection.as_of, selection.newest) == (3, 1700000005000, counted[-1])
    later = plant_dead_letters(client, DINING, 2, lambda n: "e", prefix="later")
    for job_id in later:
        client.hset(DINING.job(job_id), "finished_at", "1700000005000")
    report = await ACTIONS[action](queue, selection)
    assert client.lrange(DINING.dead, 0, -1) == list(reversed(later))
    assert (report.done, report.gone, report.newer) == (3, 0, 2)


DAMAGED = {
    "attempts": "many",
    "finished_at": "yesterday",
    "enqueued_at": "soon",
}


@pytest.mark.parametrize("field", [*DAMAGED, "finished_at=1e400", "no finished_at"])
async def test_a_letter_whose_fields_do_not_parse_is_listed_and_purged_with_the_rest(
    queue: JobQueue, client: SyncClient, field: str
) -> None:
    ids = plant_dead_letters(client, DINING, 3, lambda n: f"error {n}")
    damaged = ids[1]  # between two sound ones
    if field == "no finished_at":
        client.hdel(DINING.job(damaged), "finished_at")
    elif field.startswith("finished_at="):
        client.hset(DINING.job(damaged), "finished_at", field.partition("=")[2])
    else:
        client.hset(DINING.job(damaged), field, DAMAGED[field])
    selection = await select_dead_letters(queue, "dining", every=True)
    report = await purge_dead_letters(queue, selection)
    assert (report.selected, report.done, report.newer) == (3, 3, 0)
    assert client.llen(DINING.dead) == 0 and not client.exists(DINING.job(damaged))


async def test_a_letter_whose_id_is_not_utf8_is_purged_by_that_id(
    queue: JobQueue, client: SyncClient
) -> None:
    [sound] = plant_dead_letters(client, DINING, 1, lambda n: "e")
    binary = b"caf\xe9-1"
    fields = sync_reply(client.hgetall(DINING.job(sound)))
    # A decoding client still writes bytes as they are.
    client.execute_command("HSET", DINING.job("").encode() + binary, *sum(fields.items(), ()))  # type: ignore[no-untyped-call]
    client.lpush(DINING.dead, binary)
    job_id = binary.decode("utf-8", "surrogateescape")  # as a command line reads it
    selection = await select_dead_letters(queue, "dining", job_ids=[job_id])
    assert selection.job_ids == (job_id,)
    report = await purge_dead_letters(queue, selection)
    assert report.done == 1 and client.lrange(DINING.dead, 0, -1) == [sound]
