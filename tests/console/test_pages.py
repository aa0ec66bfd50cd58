"""Every GET page of the console over a real queue: what it shows, its errors, its
escaping of user data and its security headers."""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path

import httpx
import pytest
from fastapi import HTTPException

from platform_common.jobs.console import ConsoleLinks
from platform_common.jobs.console.csrf import SESSION_COOKIE
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.operations.formatting import timestamp
from platform_common.jobs.queue import JobPayload, JobQueue, QueueSettings
from platform_common.jobs.redis.url import RedisClient
from tests.console.conftest import (
    HOSTILE,
    PREFIX,
    client_of,
    console_app,
    make_dead_letters,
)
from tests.support.dead_letter_race import fail_with_error_text
from tests.support.progress_jobs import reporting_job
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer
from tests.support.stored_jobs import to_job_hash

ROOT = Path(__file__).resolve().parents[2]
DINING = QueueKeys("dining")


async def test_overview_lists_each_type_with_counts_and_refreshes(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    await make_dead_letters(queue, ["boom"])
    await queue.enqueue_many([make_job() for _ in range(3)])  # after: no worker takes them
    response = await client.get(f"{PREFIX}/")
    assert response.status_code == 200
    page = response.text
    assert '<meta http-equiv="refresh" content="10">' in page
    for agent_type in queue.settings.agent_types:
        assert f'href="{PREFIX}/types/{agent_type}"' in page
    assert f'href="{PREFIX}/types/dining/dead" class="alert">1</a>' in page
    assert 'list=waiting">3</a>' in page
    assert "<svg" in page and "of 60 min read" in page


async def test_pages_carry_security_headers_and_a_session_cookie(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get(f"{PREFIX}/")
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and f"Path={PREFIX}/" in cookie
    again = await client.get(f"{PREFIX}/")
    assert "set-cookie" not in again.headers  # the session is kept, not renewed


async def test_waiting_jobs_are_paged_newest_first_with_a_cursor(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    ids = [await queue.enqueue(make_job()) for _ in range(25)]
    # Newest first in the order each entered the queue: the queue list's (LPUSH'd) order,
    # which holds every waiting job, packed in `queued` or with a job hash.
    newest_first = ids[::-1]
    keys = queue.connection.keys("dining")
    assert await queue.connection.client.lrange(keys.queue, 0, -1) == newest_first
    # One of each page waits with a job hash (as a requeued job, or one of the previous
    # layout): listed in its place all the same.
    for job_id in (ids[2], ids[22]):
        await to_job_hash(queue.connection.client, keys, job_id)
    first = await client.get(f"{PREFIX}/types/dining", params={"list": "waiting"})
    assert first.status_code == 200
    assert _job_ids(first.text, ids) == newest_first[:20]
    assert "20 shown of 25" in first.text
    older = f"{PREFIX}/types/dining?list=waiting&amp;cursor=5"
    assert older in first.text
    second = await client.get(f"{PREFIX}/types/dining", params={"list": "waiting", "cursor": 5})
    assert _job_ids(second.text, ids) == newest_first[20:]
    assert "cursor=" not in second.text  # the last page


async def test_running_jobs_show_their_worker_and_lease(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    release = asyncio.Event()

    async def hold(job: JobPayload) -> None:
        await release.wait()

    job_id = await queue.enqueue(make_job())
    async with running_worker(queue.settings, hold) as worker:

        async def running() -> bool:
            return (await queue.stats("dining")).in_progress == 1

        await eventually(running)
        page = (await client.get(f"{PREFIX}/types/dining", params={"list": "running"})).text
        release.set()
    assert job_id in page
    assert html.escape(worker.worker_id) in page
    assert "Lease runs out" in page and "in " in page and " ago" in page


async def test_delayed_jobs_show_when_they_are_due(redis_url: str) -> None:
    async def fail(job: JobPayload) -> None:
        raise RuntimeError("try later")

    from tests.support.queue_runtime import fast_settings

    settings = fast_settings(redis_url, max_attempts=3, backoff_base=300.0)
    async with await JobQueue.connect(settings) as queue, client_of(console_app(queue)) as client:
        job_id = await queue.enqueue(make_job())
        async with running_worker(settings, fail):

            async def delayed() -> bool:
                return (await queue.stats("dining")).delayed == 1

            await eventually(delayed)
        page = (await client.get(f"{PREFIX}/types/dining", params={"list": "delayed"})).text
    assert job_id in page and "try later" in page
    assert "delayed (1)" in page and "<time" in page and ">in " in page


async def test_dead_list_of_the_type_page(queue: JobQueue, client: httpx.AsyncClient) -> None:
    [job_id] = await make_dead_letters(queue, ["kaput"])
    page = (await client.get(f"{PREFIX}/types/dining", params={"list": "dead"})).text
    assert job_id in page and "kaput" in page and 'aria-current="page">dead (1)' in page


async def test_job_page_shows_state_attempts_traceback_payload_and_result(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    [job_id] = await make_dead_letters(queue, ["no table left"])
    response = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert response.status_code == 200
    page = response.text
    assert "state-dead" in page and "Attempt 1: error" in page
    assert "RuntimeError: no table left" in page
    assert 'class="traceback"' in page and "Traceback" in page
    assert "&#34;curated_shortlist&#34;: [" in page  # pretty JSON, indented, escaped
    assert "&#34;status&#34;: &#34;dead" in page or "&#34;status&#34;: &#34;failed" in page


async def retried(settings: QueueSettings, queue: JobQueue, *, dead: bool) -> str:
    """A job whose first attempt failed: dead after its retry failed too, or still
    delayed for that retry."""
    job_id = await queue.enqueue(make_job())

    async def settled() -> bool:
        stats = await queue.stats("dining")
        return stats.dead == 1 if dead else stats.delayed == 1

    async with running_worker(settings, fail_with_error_text):
        await eventually(settled)
    return job_id


async def test_job_page_of_a_dead_job_says_how_long_it_is_kept_and_no_retry(
    redis_url: str, redis_client: RedisClient
) -> None:
    settings = fast_settings(redis_url, max_attempts=2, backoff_base=0.05)
    async with await JobQueue.connect(settings) as queue, client_of(console_app(queue)) as client:
        job_id = await retried(settings, queue, dead=True)
        page = (await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")).text
    assert await redis_client.hget(DINING.job(job_id), "due_at")  # the record keeps it
    dropped_at = int(await redis_client.pexpiretime(DINING.job(job_id)))
    kept = timestamp(dropped_at / 1000, "seconds")
    assert "state-dead" in page
    assert f'<dt>Kept until</dt><dd><time datetime="{kept}"' in page
    assert "(the dead-letter retention)</dd>" in page
    assert "<dt>Expires</dt>" not in page and "Retry due" not in page
    assert "retry scheduled for" in page  # the first attempt's, as history


async def test_job_page_of_a_job_delayed_for_a_retry_says_when_it_is_due(
    redis_url: str, redis_client: RedisClient
) -> None:
    settings = fast_settings(redis_url, max_attempts=3, backoff_base=300.0)
    async with await JobQueue.connect(settings) as queue, client_of(console_app(queue)) as client:
        job_id = await retried(settings, queue, dead=False)
        page = (await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")).text
    due_at, expires_at = await redis_client.hmget(DINING.job(job_id), ["due_at", "expires_at"])
    assert (
        f'<dt>Retry due</dt><dd><time datetime="{timestamp(int(due_at) / 1000, "seconds")}"' in page
    )
    assert (
        f'<dt>Expires</dt><dd><time datetime="{timestamp(int(expires_at) / 1000, "seconds")}"'
        in page
    )
    assert "Kept until" not in page


async def test_user_data_is_shown_inert(queue: JobQueue, client: httpx.AsyncClient) -> None:
    [job_id] = await make_dead_letters(queue, [HOSTILE], task=HOSTILE)
    pages = [
        await client.get(f"{PREFIX}/types/dining/jobs/{job_id}"),
        await client.get(f"{PREFIX}/types/dining/dead"),
        await client.get(f"{PREFIX}/types/dining", params={"list": "dead"}),
    ]
    for response in pages:
        assert response.status_code == 200
        assert "<script" not in response.text.lower()
        assert "&lt;script&gt;alert(" in response.text
    assert pages[0].text.count("&lt;script&gt;") >= 3  # payload, error, traceback


async def test_dead_letters_page_filters_by_error_text(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    timeouts = await make_dead_letters(queue, ["TimeoutError (a)", "TimeoutError (b)"])
    others = await make_dead_letters(queue, ["ValueError: [x]"])
    page = (
        await client.get(f"{PREFIX}/types/dining/dead", params={"error": "TimeoutError ("})
    ).text
    assert all(j in page for j in timeouts) and others[0] not in page
    assert "2 matching" in page
    literal = (await client.get(f"{PREFIX}/types/dining/dead", params={"error": "[x]"})).text
    assert others[0] in literal and timeouts[0] not in literal  # text, not an expression
    unfiltered = (await client.get(f"{PREFIX}/types/dining/dead")).text
    assert "3 of 3 dead letters" in unfiltered and 'name="do"' in unfiltered


async def test_dead_letters_page_is_paged(queue: JobQueue) -> None:
    ids = await make_dead_letters(queue, [f"e{i}" for i in range(5)])
    async with client_of(console_app(queue, page_size=3)) as client:
        first = (await client.get(f"{PREFIX}/types/dining/dead")).text
        second = (await client.get(f"{PREFIX}/types/dining/dead", params={"start": 3})).text
    assert sum(j in first for j in ids) == 3 and "start=3" in first
    assert sum(j in second for j in ids) == 2 and "start=" not in second.split("Newest")[-1]


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/types/nope", 404, "unknown agent type &#39;nope&#39;"),
        ("/types/nope/dead", 404, "unknown agent type"),
        ("/types/nope/jobs/x", 404, "unknown agent type"),
        ("/types/dining/jobs/no-such-job", 404, "no job &#39;no-such-job&#39;"),
        ("/types/dining/jobs/" + "x" * 201, 404, "no such job"),
    ],
)
async def test_missing_things_are_404_pages(
    client: httpx.AsyncClient, path: str, status: int, text: str
) -> None:
    response = await client.get(PREFIX + path)
    assert response.status_code == status
    assert text in response.text and "Back to the overview" in response.text


@pytest.mark.parametrize(
    "query",
    [{"list": "finished"}, {"cursor": "-1"}, {"cursor": "abc"}],
)
async def test_malformed_queries_are_refused(
    client: httpx.AsyncClient, query: dict[str, str]
) -> None:
    response = await client.get(f"{PREFIX}/types/dining", params=query)
    assert response.status_code == 400 and "Bad request" in response.text


async def test_the_host_apps_authentication_guards_every_route(queue: JobQueue) -> None:
    def deny() -> None:
        raise HTTPException(401, "log in first")

    async with client_of(console_app(queue, auth_dependency=deny)) as client:
        for method, path in [
            ("GET", "/"), ("GET", "/types/dining"), ("GET", "/types/dining/jobs/x"),
            ("GET", "/types/dining/dead"), ("GET", "/static/console.css"),
            ("POST", "/types/dining/dead/confirm"), ("POST", "/types/dining/dead/act"),
        ]:  # fmt: skip
            response = await client.request(method, PREFIX + path)
            assert response.status_code == 401, path


async def test_links_to_the_runbooks_and_grafana(queue: JobQueue) -> None:
    links = ConsoleLinks(
        runbooks="http://exporter:9808/runbooks/",
        grafana_dashboard="http://grafana:3000/d/queue-overview",
    )
    await make_dead_letters(queue, ["x"])
    async with client_of(console_app(queue, links=links)) as client:
        dead = (await client.get(f"{PREFIX}/types/dining/dead")).text
        kind = (await client.get(f"{PREFIX}/types/dining")).text
        overview = (await client.get(f"{PREFIX}/")).text
    grafana = "http://grafana:3000/d/queue-overview"
    assert 'href="http://exporter:9808/runbooks/DeadLetterDepthHigh"' in dead
    assert f'href="{grafana}?var-agent_type=dining&amp;viewPanel=12"' in dead
    assert 'href="http://exporter:9808/runbooks/QueueDepthHigh"' in kind
    assert 'href="http://exporter:9808/runbooks/QueueNoActiveWorkers"' in kind
    assert f'href="{grafana}?var-agent_type=dining"' in kind
    assert f'href="{grafana}?var-agent_type=dining&amp;viewPanel=11"' in kind
    assert 'href="http://exporter:9808/runbooks/"' in overview and f'href="{grafana}"' in overview


def test_the_panels_linked_are_the_generated_dashboards() -> None:
    dashboard = json.loads((ROOT / "dashboards/queue-overview.json").read_text())
    titles = {panel["id"]: panel["title"] for panel in dashboard["panels"]}
    links = ConsoleLinks(grafana_dashboard="http://grafana:3000/d/queue-overview")
    for name, title in [("QUEUE_DEPTH", "Queue depth per agent type"),
                        ("DEAD_LETTER_DEPTH", "Dead-letter depth")]:  # fmt: skip
        url = links.panel("dining", name)
        assert url is not None
        assert titles[int(url.rsplit("viewPanel=", 1)[1])] == title


def test_links_must_be_web_addresses() -> None:
    with pytest.raises(ValueError, match=r"ConsoleLinks\.runbooks must be an http"):
        ConsoleLinks(runbooks="javascript:alert(1)")


async def test_stylesheet_is_served(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{PREFIX}/static/console.css")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/css")
    assert "@media" in response.text


async def test_an_unreachable_redis_is_a_503_page() -> None:
    server = RedisServer().start()
    try:
        async with (
            await JobQueue.connect(server.url) as queue,
            client_of(console_app(queue)) as client,
        ):
            server.cleanup()  # Redis goes away under a running console
            response = await client.get(f"{PREFIX}/")
    finally:
        server.cleanup()
    assert response.status_code == 503 and "Redis is unavailable" in response.text


def _job_ids(page: str, ids: list[str]) -> list[str]:
    """The ids of `ids` in the order the page shows them."""
    return sorted((i for i in ids if i in page), key=page.index)


async def test_a_scheduled_job_is_delayed_and_its_page_says_when_it_runs(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    job_id = await queue.enqueue(make_job(), delay=40)
    delayed = await client.get(f"{PREFIX}/types/dining", params={"list": "delayed"})
    assert job_id in delayed.text and "delayed (1)" in delayed.text
    page = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert page.status_code == 200
    assert re.search(r"<dt>Scheduled for</dt><dd><time [^>]*>in \d+\.\ds</time>", page.text)


async def test_a_running_jobs_page_shows_its_last_progress_as_text(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    job_id, at = await reporting_job(queue, {"step": HOSTILE, "done": 2})
    page = (await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")).text
    assert "<h2>Progress</h2>" in page
    assert f'Last reported <time datetime="{timestamp(at / 1000, "seconds")}"' in page
    assert "&lt;script&gt;alert(" in page and "<script" not in page.lower()
    assert "&#34;done&#34;: 2" in page
    other = await queue.enqueue(make_job())
    assert "<h2>Progress</h2>" not in (await client.get(f"{PREFIX}/types/dining/jobs/{other}")).text


async def test_the_overview_and_the_job_page_show_the_priority(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    high, low, normal = await queue.enqueue_many(
        [make_job() for _ in range(3)], priority=["high", "low", None]
    )
    overview = (await client.get(f"{PREFIX}/")).text
    assert 'list=waiting">3</a> <span class="levels">(high 1, low 1)</span>' in overview
    for job_id, level in ((high, "high"), (low, "low"), (normal, "normal")):
        page = (await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")).text
        assert f"<dt>Priority</dt><dd>{level}</dd>" in page
