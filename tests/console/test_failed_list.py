"""The failed jobs (a handler's NonRetryableError) in the console: the agent type's
`?list=failed`, and their own page with the dead letters' filter and forms (confirm,
then act; CSRF, read-only), acting on the failed list only. Redis is read afterwards
to see what changed."""

from __future__ import annotations

from typing import Any

import httpx

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from tests.console.conftest import (
    PREFIX,
    client_of,
    confirmed_form,
    console_app,
    csrf_token,
    make_dead_letters,
)
from tests.support.dead_letter_race import make_failed_jobs

FAILED = f"{PREFIX}/types/dining/failed"
DINING = QueueKeys("dining")


async def post(client: httpx.AsyncClient, path: str, **fields: Any) -> httpx.Response:
    return await client.post(f"{FAILED}/{path}", data=fields)


async def test_the_agent_type_page_lists_the_failed_jobs(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    failed = await make_failed_jobs(queue, ["card declined", "venue closed"])
    [dead] = await make_dead_letters(queue, ["kaput"])
    response = await client.get(f"{PREFIX}/types/dining", params={"list": "failed"})
    assert response.status_code == 200, response.text
    page = response.text
    assert all(j in page for j in failed) and dead not in page
    assert 'aria-current="page">failed (2)' in page and ">dead (1)<" in page
    assert "Failed since" in page and "NonRetryableError: venue closed" in page
    assert f'href="{FAILED}"' in page  # the failed jobs' own page, with its actions


async def test_the_failed_page_filters_and_offers_the_actions(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    declined, closed = await make_failed_jobs(queue, ["card declined", "venue closed"])
    [dead] = await make_dead_letters(queue, ["card declined too"])
    page = (await client.get(FAILED, params={"error": "card"})).text
    assert declined in page and closed not in page and dead not in page
    assert "1 matching “card” among the rest of 2 failed jobs" in page
    assert f'action="{FAILED}/confirm"' in page and 'value="purge:matching"' in page
    assert "<h1>Failed jobs</h1>" in page


async def test_requeue_selected_failed_jobs_after_confirmation(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    first, second = await make_failed_jobs(queue, ["a", "b"])
    [dead] = await make_dead_letters(queue, ["c"])
    csrf = csrf_token((await client.get(FAILED)).text)
    picked = {"csrf": csrf, "do": "requeue:selected", "error": "", "ids": [first, dead]}
    confirm = await post(client, "confirm", **picked)
    assert confirm.status_code == 200, confirm.text
    assert "Requeue 1 failed job?" in confirm.text
    assert f'Not failed jobs (any more), left alone: <span class="id">{dead}' in confirm.text
    assert f'action="{FAILED}/act"' in confirm.text
    assert await queue.failed_jobs.count("dining") == 2  # nothing changed yet
    done = await post(client, "act", **confirmed_form(confirm.text))
    assert done.status_code == 200, done.text
    assert "Requeued 1 of the 1 failed job of dining shown" in done.text
    assert [j.job_id for j in await queue.failed_jobs.list("dining")] == [second]
    assert await queue.connection.client.lrange(DINING.queue, 0, -1) == [first]
    assert [j.job_id for j in await queue.dead_letters.list("dining")] == [dead]


async def test_purge_every_failed_job_touches_the_confirmed_ones_only(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    counted = await make_failed_jobs(queue, ["a", "b"])
    [dead] = await make_dead_letters(queue, ["c"])
    csrf = csrf_token((await client.get(FAILED)).text)
    confirm = await post(client, "confirm", csrf=csrf, do="purge:matching", error="")
    assert "Purge 2 failed jobs?" in confirm.text and "Every failed job of dining" in confirm.text
    [later] = await make_failed_jobs(queue, ["d"])  # failed after the count
    done = await post(client, "act", **confirmed_form(confirm.text))
    assert "Purged 2 of the 2 failed jobs of dining shown" in done.text
    assert "1 failed after " in done.text and "was left untouched" in done.text
    assert [j.job_id for j in await queue.failed_jobs.list("dining")] == [later]
    assert not await queue.connection.client.exists(*(DINING.job(j) for j in counted))
    assert await queue.dead_letters.count("dining") == 1 and dead


async def test_the_failed_forms_keep_the_dead_letters_rules(queue: JobQueue) -> None:
    [job_id] = await make_failed_jobs(queue, ["a"])
    async with client_of(console_app(queue)) as client:
        await client.get(FAILED)  # a session, but not its token
        forged = await post(client, "confirm", csrf="0" * 64, do="purge:selected", ids=job_id)
        assert forged.status_code == 403 and "security token" in forged.text
        csrf = csrf_token((await client.get(FAILED)).text)
        none = await post(client, "confirm", csrf=csrf, do="requeue:selected", error="")
        assert none.status_code == 400 and "no failed job selected" in none.text
    async with client_of(console_app(queue, read_only=True)) as client:
        page = (await client.get(FAILED)).text
        assert job_id in page and 'method="post"' not in page
        refused = await post(client, "act", csrf="x", do="purge:selected", ids=job_id, count="1")
        assert refused.status_code == 403 and "read-only" in refused.text
    assert await queue.failed_jobs.count("dining") == 1
