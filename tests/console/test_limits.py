"""The console shows an agent type's limits on its page (JobQueue.limits): none, each
one set, and a limits key the claim would refuse, named (the page still renders)."""

from __future__ import annotations

import html

import httpx

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from tests.console.conftest import PREFIX

PAGE = f"{PREFIX}/types/dining"
DINING = QueueKeys("dining")


async def test_the_type_page_shows_its_limits(queue: JobQueue, client: httpx.AsyncClient) -> None:
    page = (await client.get(PAGE)).text
    assert "No limits: workers take its jobs in order (FIFO)" in page
    await queue.set_limits("dining", fair_by="tenant", rate="30/m", max_running=4)
    page = html.unescape((await client.get(PAGE)).text)
    assert "<dt>fair_by</dt><dd>tenant</dd>" in page
    assert "<dt>rate</dt><dd>30/m job starts, across every worker</dd>" in page
    assert "<dt>burst</dt><dd>the rate's count (30)</dd>" in page
    assert "<dt>max_running</dt><dd>4</dd>" in page
    assert "<dt>max_running_per_key</dt><dd>none</dd>" in page
    assert "key weights" not in page
    await queue.set_key_weights("dining", {"acme": 3, "<b>": 2})
    page = (await client.get(PAGE)).text
    assert "<dt>key weights</dt><dd><code>&lt;b&gt;</code> 2, <code>acme</code> 3</dd>" in page


async def test_a_corrupt_limits_key_is_named_on_the_page(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    await queue.connection.client.hset(DINING.limits, "max_running", "<b>0</b>")
    response = await client.get(PAGE)
    assert response.status_code == 200
    assert "<strong>Limits unreadable</strong>" in response.text
    assert f"corrupt queue state at {DINING.limits}: field max_running" in response.text
    assert "<b>0</b>" not in response.text  # escaped, never markup


async def test_the_type_page_names_the_keys_waiting_longest(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    """Fair share's waits (JobQueue.fair_waits): the keys with jobs waiting, the ones gone
    longest without a start first; a key's name is text, never markup."""
    await queue.set_limits("dining", fair_by="session_id")
    page = (await client.get(PAGE)).text
    assert "Fair share: 0 key(s) with jobs waiting" in page
    redis = queue.connection.client
    seconds, _ = await redis.time()
    now_ms = int(seconds) * 1000
    await redis.hset(
        DINING.fair_since, mapping={"<i>x</i>": now_ms - 90_000, "acme": now_ms - 1_000}
    )
    page = (await client.get(PAGE)).text
    assert "Fair share: 2 key(s) with jobs waiting; waiting longest without a start:" in page
    assert page.index("&lt;i&gt;x&lt;/i&gt;") < page.index("<code>acme</code>")
    assert "<i>x</i>" not in page
    await redis.delete(DINING.fair_since)
    await redis.set(DINING.fair_since, "planted")
    page = (await client.get(PAGE)).text
    assert "<strong>Fair share unreadable</strong>" in page
