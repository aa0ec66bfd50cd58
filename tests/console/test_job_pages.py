"""operations.list_jobs and list_dead_letters(start=) on a single server and a cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from platform_common.jobs.errors import ValidationError
from platform_common.jobs.operations import JobList, list_dead_letters, list_jobs
from platform_common.jobs.queue import JobQueue
from tests.console.conftest import make_dead_letters
from tests.support.backends import CLUSTER, parametrize_backends
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import fast_settings

SINGLE = "single"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc, "redis_backend", (SINGLE, CLUSTER))


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
async def backend_queue(
    redis_backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[JobQueue]:
    url = request.getfixturevalue("cluster_url" if redis_backend == CLUSTER else "single_node_url")
    async with await JobQueue.connect(fast_settings(url, max_attempts=1)) as queue:
        yield queue


async def test_pages_cover_the_list_once_newest_first(backend_queue: JobQueue) -> None:
    ids = [await backend_queue.enqueue(make_job()) for _ in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        page = await list_jobs(backend_queue, "dining", JobList.WAITING, cursor=cursor, limit=3)
        assert page.total == 7 and len(page.jobs) <= 3
        seen += [line.job_id for line in page.jobs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(ids) and len(seen) == 7
    enqueued = [line.enqueued_at or 0 for line in (await list_jobs(
        backend_queue, "dining", JobList.WAITING, limit=7)).jobs]  # fmt: skip
    assert enqueued == sorted(enqueued, reverse=True)


async def test_new_arrivals_do_not_shift_the_next_page(backend_queue: JobQueue) -> None:
    older = [await backend_queue.enqueue(make_job()) for _ in range(4)]
    first = await list_jobs(backend_queue, "dining", JobList.WAITING, limit=2)
    await backend_queue.enqueue_many([make_job() for _ in range(3)])
    second = await list_jobs(
        backend_queue, "dining", JobList.WAITING, cursor=first.next_cursor, limit=2
    )
    shown = {line.job_id for line in first.jobs} | {line.job_id for line in second.jobs}
    assert shown == set(older)


async def test_dead_jobs_list_and_dead_letter_listing_from_a_start(
    backend_queue: JobQueue,
) -> None:
    ids = await make_dead_letters(backend_queue, ["a", "b", "c"])
    page = await list_jobs(backend_queue, "dining", JobList.DEAD, limit=10)
    assert {line.job_id for line in page.jobs} == set(ids)
    assert all(line.state == "dead" and line.last_error for line in page.jobs)
    full = await list_dead_letters(backend_queue, "dining", limit=10)
    rest = await list_dead_letters(backend_queue, "dining", limit=10, start=1)
    assert [x.job_id for x in rest.letters] == [x.job_id for x in full.letters][1:]


@pytest.mark.single_node("argument checks, before any read")
@pytest.mark.parametrize(
    ("limit", "cursor", "field"), [(0, None, "limit"), (101, None, "limit"), (5, -1, "cursor")]
)
async def test_bad_arguments_are_refused(
    backend_queue: JobQueue, limit: int, cursor: int | None, field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        await list_jobs(backend_queue, "dining", JobList.WAITING, cursor=cursor, limit=limit)
    assert caught.value.field == field
    with pytest.raises(ValidationError, match="unknown agent type 'nope'"):
        await list_jobs(backend_queue, "nope", JobList.WAITING)


async def test_waiting_pages_cover_every_level_in_the_order_they_are_taken(
    backend_queue: JobQueue,
) -> None:
    """The three levels' lists paged as one: low's newest first, high's next-taken last;
    a wake marker on the queue list is no job and is left out."""
    low = await backend_queue.enqueue_many([make_job() for _ in range(2)], priority="low")
    normal = await backend_queue.enqueue_many([make_job() for _ in range(2)])
    high = await backend_queue.enqueue_many([make_job() for _ in range(2)], priority="high")
    shown: list[str] = []
    cursor = None
    while True:
        page = await list_jobs(backend_queue, "dining", JobList.WAITING, cursor=cursor, limit=3)
        shown += [line.job_id for line in page.jobs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert shown == [*low[::-1], *normal[::-1], *high[::-1]]
    assert page.total == 7  # the six jobs and the low call's wake marker
