"""The console's search by job id (found in one type, in several, nowhere; hostile and
huge input) and its workers page (a live worker with its running job, a stale one, the
cap), over a real redis-server."""

from __future__ import annotations

import httpx
import pytest

from platform_common.jobs.console import router as console_router_module
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.console.conftest import HOSTILE, PREFIX
from tests.support.queue_handlers import make_job

DINING, FLIGHTS = QueueKeys("dining"), QueueKeys("flights")


async def test_the_header_links_the_workers_and_offers_the_search(
    client: httpx.AsyncClient,
) -> None:
    page = (await client.get(f"{PREFIX}/")).text
    assert f'href="{PREFIX}/workers"' in page
    assert f'action="{PREFIX}/search"' in page and 'name="id"' in page


async def test_an_id_found_in_one_type_goes_to_its_page(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    job_id = await queue.enqueue(make_job())  # waiting, packed in the queued hash
    for params in ({"id": job_id}, {"id": job_id, "type": "dining"}):
        found = await client.get(f"{PREFIX}/search", params=params)
        assert found.status_code == 303
        assert found.headers["location"] == f"{PREFIX}/types/dining/jobs/{job_id}"
        assert found.headers["content-security-policy"].startswith("default-src 'none'")
    page = await client.get(f"{PREFIX}/search", params={"id": job_id}, follow_redirects=True)
    assert page.status_code == 200 and job_id in page.text


async def test_an_id_in_two_types_offers_both(
    queue: JobQueue, client: httpx.AsyncClient, redis_client: RedisClient
) -> None:
    await queue.enqueue(make_job(job_id="shared-1"))
    # The other type's job hash holds a string: a key someone broke still says it is there.
    await redis_client.set(FLIGHTS.job("shared-1"), "not a hash")
    await redis_client.sadd(QueueKeys.types_key(), "flights")
    page = await client.get(f"{PREFIX}/search", params={"id": "shared-1"})
    assert page.status_code == 200
    assert f'href="{PREFIX}/types/dining/jobs/shared-1"' in page.text
    assert f'href="{PREFIX}/types/flights/jobs/shared-1"' in page.text


async def test_an_unknown_id_is_no_such_job(queue: JobQueue, client: httpx.AsyncClient) -> None:
    await queue.enqueue(make_job(job_id="here-1"))
    nowhere = await client.get(f"{PREFIX}/search", params={"id": "never-1"})
    assert nowhere.status_code == 404 and "No such job" in nowhere.text
    assert "agent types listed" in nowhere.text
    elsewhere = await client.get(f"{PREFIX}/search", params={"id": "here-1", "type": "flights"})
    assert elsewhere.status_code == 404 and "in agent type flights" in elsewhere.text
    unknown_type = await client.get(f"{PREFIX}/search", params={"id": "here-1", "type": HOSTILE})
    assert unknown_type.status_code == 404 and "unknown agent type" in unknown_type.text
    assert HOSTILE not in unknown_type.text
    empty = await client.get(f"{PREFIX}/search", params={"id": ""})
    assert empty.status_code == 400 and "give the id" in empty.text


@pytest.mark.parametrize("job_id", [HOSTILE, "ü" * 3, "a/b", "x" * 10_000, "a b\nc"])
async def test_an_id_no_job_can_have_is_no_such_job_escaped(
    client: httpx.AsyncClient, job_id: str
) -> None:
    page = await client.get(f"{PREFIX}/search", params={"id": job_id})
    assert page.status_code == 404 and "no such job" in page.text
    assert HOSTILE not in page.text and len(page.text) < 8_000
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


async def test_the_workers_page_shows_live_and_stale_workers(
    queue: JobQueue, client: httpx.AsyncClient, redis_client: RedisClient
) -> None:
    chores, calls = Chores(queue.connection, "dining"), AttemptCalls(queue.connection, "dining")
    live = "host-a.internal:4242:9f3c"
    job_id = await queue.enqueue(make_job())
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    _, claims = await calls.claim(live, [(job_id, "token-1")])
    assert [c.job_id for c in claims] == [job_id]
    now_ms = await chores.heartbeat(live, 1, concurrency=8)
    # A worker silent for a minute: stale (the active window is 6 heartbeats, 1.2 s here).
    await redis_client.zadd(DINING.workers, {HOSTILE: now_ms - 60_000})
    page = await client.get(f"{PREFIX}/workers")
    assert page.status_code == 200
    cells = page.text.split('<th scope="row" class="id">')[1:]
    rows = {row.split("</th>")[0]: row for row in cells}
    assert set(rows) == {live, "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;"}
    assert "host-a.internal" in rows[live] and "4242" in rows[live] and ">active<" in rows[live]
    assert '<td class="num">8</td>' in rows[live]  # its concurrency
    assert f'href="{PREFIX}/types/dining/jobs/{job_id}"' in rows[live]
    stale = rows["&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;"]
    assert ">stale<" in stale and "1m0" in stale
    assert HOSTILE not in page.text


async def test_the_workers_page_is_capped_with_a_note(
    queue: JobQueue, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    chores = Chores(queue.connection, "dining")
    for number in range(3):
        await chores.heartbeat(f"w{number}", 0)
    monkeypatch.setattr(console_router_module, "MAX_WORKERS_SHOWN", 2)
    page = (await client.get(f"{PREFIX}/workers")).text
    assert page.count('<th scope="row" class="id">') == 2
    assert "Showing the first 2 of 3 workers" in page
