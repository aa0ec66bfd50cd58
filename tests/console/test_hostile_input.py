"""Hostile input to the console: markup in every place user text reaches a page (paths,
queries, forms, results), cursors and starts no page of the console draws, a payload of
megabytes and stored records that do not parse. Each is answered with a page, inert and
bounded, never a server error."""

from __future__ import annotations

import re

import httpx
import pytest
import redis.asyncio as aioredis

from platform_common.jobs.console.rendering import MAX_SHOWN_JSON
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue
from tests.console.conftest import (
    HOSTILE,
    PREFIX,
    client_of,
    confirmed_form,
    console_app,
    csrf_token,
    make_dead_letters,
)
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker

DINING = QueueKeys("dining")
MARKUP = "\"'><img src=x onerror=alert(1)>"
"""Markup without a slash, so it stays one path segment; quotes break out of attributes."""


def assert_inert(page: str) -> None:
    lowered = page.lower()
    assert "<script" not in lowered and "<img" not in lowered, page[:2000]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (f"/types/{MARKUP}", 404),
        (f"/types/{MARKUP}/dead", 404),
        (f"/types/dining/jobs/{MARKUP}", 404),
    ],
)
async def test_markup_in_a_path_comes_back_escaped(
    client: httpx.AsyncClient, path: str, status: int
) -> None:
    response = await client.get(PREFIX + path)
    assert response.status_code == status
    assert_inert(response.text)
    assert "&lt;img src=x onerror=alert(1)&gt;" in response.text


async def test_markup_in_the_error_filter_comes_back_escaped(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    await make_dead_letters(queue, [HOSTILE])
    page = await client.get(f"{PREFIX}/types/dining/dead", params={"error": MARKUP + HOSTILE})
    assert page.status_code == 200
    assert_inert(page.text)
    # In the search box's value and in the caption, as text.
    assert 'value="&#34;&#39;&gt;&lt;img' in page.text
    matching = await client.get(f"{PREFIX}/types/dining/dead", params={"error": HOSTILE})
    assert "1 matching" in matching.text and "&lt;script&gt;alert(" in matching.text
    assert_inert(matching.text)


async def test_markup_in_a_posted_form_comes_back_escaped(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    [job_id] = await make_dead_letters(queue, [HOSTILE])
    csrf = csrf_token((await client.get(f"{PREFIX}/types/dining/dead")).text)
    # Ticked ids that are no dead letters are named on the page; a filter is quoted.
    picked = await client.post(
        f"{PREFIX}/types/dining/dead/confirm",
        data={"csrf": csrf, "do": "requeue:selected", "error": "", "ids": [job_id, MARKUP]},
    )
    matching = await client.post(
        f"{PREFIX}/types/dining/dead/confirm",
        data={"csrf": csrf, "do": "purge:matching", "error": HOSTILE},
    )
    bad_action = await client.post(
        f"{PREFIX}/types/dining/dead/confirm",
        data={"csrf": csrf, "do": MARKUP, "error": ""},
    )
    assert picked.status_code == 200 and "Requeue 1 dead letter?" in picked.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in picked.text
    assert matching.status_code == 200 and "Purge 1 dead letter?" in matching.text
    assert bad_action.status_code == 400
    for response in (picked, matching, bad_action):
        assert_inert(response.text)
    assert await queue.dead_letters.count("dining") == 1  # a confirmation changes nothing


async def test_markup_in_a_result_is_shown_inert(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    async def answer(job: JobPayload) -> dict[str, str]:
        return {"summary": HOSTILE, "note": MARKUP}

    job_id = await queue.enqueue(make_job(task=HOSTILE))

    async def finished() -> bool:
        return await queue.get_result(job_id, "dining") is not None

    async with running_worker(queue.settings, answer):
        await eventually(finished)
    page = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert page.status_code == 200 and "succeeded" in page.text
    assert_inert(page.text)
    assert page.text.count("&lt;script&gt;alert(") == 2  # the payload's task, the result


@pytest.mark.parametrize("which", ["waiting", "running", "delayed", "dead"])
@pytest.mark.parametrize("cursor", ["0", "3", "9" * 16])
async def test_any_cursor_of_digits_is_a_page(
    queue: JobQueue, client: httpx.AsyncClient, which: str, cursor: str
) -> None:
    # A cursor past the end is the newest page, 0 is an empty one: both plain pages.
    await queue.enqueue_many([make_job() for _ in range(5)])
    response = await client.get(f"{PREFIX}/types/dining", params={"list": which, "cursor": cursor})
    assert response.status_code == 200, response.text
    assert "Newest</a>" in response.text  # the way back to the first page


BAD_POSITIONS = ["-1", "abc", "1.5", "1e3", "0x10", " 1", "\uff11", "9" * 17, "9" * 5000, MARKUP]
"""Not 1 to 16 ASCII digits: a sign, a fraction, an exponent, spaces, other digits,
beyond a 64-bit index (which Redis refuses), markup."""


@pytest.mark.parametrize("cursor", BAD_POSITIONS)
async def test_a_cursor_that_is_not_a_position_is_a_400_page(
    client: httpx.AsyncClient, cursor: str
) -> None:
    response = await client.get(f"{PREFIX}/types/dining", params={"cursor": cursor})
    assert response.status_code == 400, cursor
    assert "cursor: a list position" in response.text
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert_inert(response.text)


@pytest.mark.parametrize("start", ["0", "7", "9" * 16])
async def test_any_start_of_the_dead_letters_is_a_page(
    queue: JobQueue, client: httpx.AsyncClient, start: str
) -> None:
    await make_dead_letters(queue, ["a", "b"])
    response = await client.get(f"{PREFIX}/types/dining/dead", params={"start": start})
    assert response.status_code == 200, response.text
    if start != "0":
        assert "No dead letters" in response.text


@pytest.mark.parametrize("start", BAD_POSITIONS)
async def test_a_start_that_is_not_a_position_is_a_400_page(
    queue: JobQueue, client: httpx.AsyncClient, start: str
) -> None:
    await make_dead_letters(queue, ["a"])
    response = await client.get(f"{PREFIX}/types/dining/dead", params={"start": start})
    assert response.status_code == 400, start
    assert "start: a list position" in response.text
    assert_inert(response.text)


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"list": MARKUP}, "list: one of waiting, running, delayed, dead"),
        ({"error": MARKUP * 20}, "a filter is at most 500 characters"),
    ],
)
async def test_other_bad_queries_are_400_pages(
    client: httpx.AsyncClient, query: dict[str, str], problem: str
) -> None:
    path = "/types/dining" if "list" in query else "/types/dining/dead"
    response = await client.get(PREFIX + path, params=query)
    assert response.status_code == 400 and problem in response.text
    assert_inert(response.text)


async def test_a_payload_of_megabytes_makes_a_bounded_job_page(redis_url: str) -> None:
    settings = fast_settings(redis_url, max_attempts=1, max_payload_bytes=16 * 1024 * 1024)
    big = "x" * (10 * 1024 * 1024)
    async with await JobQueue.connect(settings) as queue:
        [job_id] = await make_dead_letters(queue, ["too big to book"], task=big)
        async with client_of(console_app(queue)) as client:
            job = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
            lists = [
                await client.get(f"{PREFIX}/types/dining", params={"list": "dead"}),
                await client.get(f"{PREFIX}/types/dining/dead"),
            ]
    assert job.status_code == 200
    assert len(job.content) < 1024 * 1024, len(job.content)
    assert "too big to book" in job.text  # the attempts and the result are all there
    assert f"agentjobs job show dining {job_id} --output json" in job.text
    assert f"Cut: the first {MAX_SHOWN_JSON} of " in job.text
    for page in lists:
        assert page.status_code == 200 and job_id in page.text
        assert len(page.content) < 100 * 1024, len(page.content)


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("payload", b"\xff\xfe{", "\\xff\\xfe{"),  # not UTF-8
        ("payload", b"{not json <script>x</script>", "{not json &lt;script&gt;x&lt;/script&gt;"),
        ("history", b"[{not json", "[{not json"),
        ("history", b"\xff", "\\xff"),
    ],
)
async def test_a_stored_record_that_does_not_parse_is_shown_as_stored(
    queue: JobQueue, client: httpx.AsyncClient, redis_url: str, field: str, value: bytes,
    shown: str,
) -> None:  # fmt: skip
    # Damaged by hand (enqueue checks every payload), or what the worker dead-letters as
    # corrupt: the job's page shows the field as its text and says why it does not
    # parse; the lists still show the letter, and it can be purged.
    [job_id] = await make_dead_letters(queue, ["a"])
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.hset(DINING.job(job_id), field, value)  # type: ignore[arg-type]
    finally:
        await raw.aclose()
    job = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert job.status_code == 200, job.text
    assert_inert(job.text)
    assert f"Stored fields of this job do not parse: {field}." in job.text
    assert "Does not parse: not " in job.text and shown in job.text
    assert "RuntimeError: a" in job.text  # the rest of the record is all there
    if field == "payload":
        assert "Attempt 1: error" in job.text
    else:
        assert "&#34;agent_type&#34;: &#34;dining&#34;" in job.text  # the payload's JSON
    for path in ("/types/dining?list=dead", "/types/dining/dead"):
        response = await client.get(PREFIX + path)
        assert response.status_code == 200 and job_id in response.text, path
    csrf = csrf_token(job.text)
    picked = {"csrf": csrf, "do": "purge:selected", "error": "", "ids": job_id}
    confirm = await client.post(f"{PREFIX}/types/dining/dead/confirm", data=picked)
    done = await client.post(f"{PREFIX}/types/dining/dead/act", data=confirmed_form(confirm.text))
    assert "Purged 1 of 1" in done.text
    assert await queue.dead_letters.count("dining") == 0


LISTED_DAMAGE = [
    ("attempts", "many", "many"),
    ("finished_at", "yesterday", "yesterday"),
    ("finished_at", "1e400", "1e400"),
    ("enqueued_at", "soon", None),  # on no dead list column: the letter lists as usual
]


@pytest.mark.parametrize(("field", "stored", "shown"), LISTED_DAMAGE)
async def test_a_letter_whose_fields_do_not_parse_lists_as_stored_and_is_purged(
    queue: JobQueue, client: httpx.AsyncClient, redis_url: str,
    field: str, stored: str, shown: str | None,
) -> None:  # fmt: skip
    ids = await make_dead_letters(queue, ["a", "b", "c"])
    damaged = ids[1]
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.hset(DINING.job(damaged), field, stored)
    finally:
        await raw.aclose()
    for path in ("/types/dining?list=dead", "/types/dining/dead"):
        page = await client.get(PREFIX + path)
        assert page.status_code == 200, page.text
        assert all(job_id in page.text for job_id in ids), path
        if shown is not None:
            assert f'title="does not parse">{shown}</span>' in page.text, path
    csrf = csrf_token(page.text)
    every = {"csrf": csrf, "do": "purge:matching", "error": ""}
    confirm = await client.post(f"{PREFIX}/types/dining/dead/confirm", data=every)
    assert "Purge 3 dead letters?" in confirm.text
    done = await client.post(f"{PREFIX}/types/dining/dead/act", data=confirmed_form(confirm.text))
    assert "Purged 3 of 3" in done.text
    assert await queue.dead_letters.count("dining") == 0


async def test_ids_with_a_slash_or_bytes_that_are_not_utf8_list_and_link(
    queue: JobQueue, client: httpx.AsyncClient, redis_url: str
) -> None:
    [sound] = await make_dead_letters(queue, ["a"])
    raw = aioredis.Redis.from_url(redis_url)
    try:
        record = await raw.hgetall(DINING.job(sound))
        for raw_id in (b"with/slash", b"caf\xe9-1"):
            await raw.hset(DINING.job("").encode() + raw_id, mapping=record)  # type: ignore[arg-type]
            await raw.lpush(DINING.dead, raw_id)
    finally:
        await raw.aclose()
    for path in ("/types/dining?list=dead", "/types/dining/dead"):
        page = await client.get(PREFIX + path)
        assert page.status_code == 200, page.text
        assert "with/slash" in page.text and "caf\\xe9-1" in page.text, path
        assert f'href="{PREFIX}/types/dining/jobs/with%2Fslash"' in page.text
    job = await client.get(f"{PREFIX}/types/dining/jobs/with%2Fslash")
    assert job.status_code == 200 and '<h1 class="id">with/slash</h1>' in job.text
    csrf = csrf_token(page.text)
    picked = {"csrf": csrf, "do": "purge:selected", "error": "", "ids": "with/slash"}
    confirm = await client.post(f"{PREFIX}/types/dining/dead/confirm", data=picked)
    done = await client.post(f"{PREFIX}/types/dining/dead/act", data=confirmed_form(confirm.text))
    assert "Purged 1 of 1" in done.text
    assert await queue.dead_letters.count("dining") == 2


async def test_a_damaged_packed_header_is_an_error_page(
    queue: JobQueue, client: httpx.AsyncClient, redis_url: str
) -> None:
    job_id = await queue.enqueue(make_job())
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.hset(DINING.queued, job_id, "not a header")
    finally:
        await raw.aclose()
    job = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert job.status_code == 500 and "does not parse" in job.text
    assert_inert(job.text)


async def test_a_form_of_too_many_fields_is_refused(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    # Under the byte bound, over the field bound: parse_qs stops at 1,000 fields.
    csrf = csrf_token((await client.get(f"{PREFIX}/types/dining/dead")).text)
    fields = {"csrf": csrf, "do": "purge:selected", "error": "", "ids": ["x"] * 1001}
    response = await client.post(f"{PREFIX}/types/dining/dead/confirm", data=fields)
    assert response.status_code == 400 and "malformed form" in response.text


async def test_a_damaged_field_is_shown_once_and_the_title_stays_plain_text(
    queue: JobQueue, client: httpx.AsyncClient, redis_url: str
) -> None:
    # A field beside the payload, history and result (here a count) that does not parse
    # gets its own section, once, in the page; the title names the job, as text.
    [job_id] = await make_dead_letters(queue, ["a"])
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.hset(DINING.job(job_id), "attempts", MARKUP)
    finally:
        await raw.aclose()
    job = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert job.status_code == 200, job.text
    assert_inert(job.text)
    [title] = re.findall(r"<title>(.*?)</title>", job.text, re.DOTALL)
    assert title == f"Job {job_id} · agentjobs console"
    assert job.text.count("<h2>Other stored fields</h2>") == 1
    assert job.text.count("<h3>attempts</h3>") == 1


async def test_a_long_job_id_is_cut_in_the_title(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    job_id = await queue.enqueue(make_job(job_id="b" * 120))
    job = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
    assert job.status_code == 200 and f'<h1 class="id">{job_id}</h1>' in job.text
    [title] = re.findall(r"<title>(.*?)</title>", job.text, re.DOTALL)
    assert title == f"Job {'b' * 59}… · agentjobs console"
