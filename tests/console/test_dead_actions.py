"""The console's changes: requeue and purge of dead letters through a confirmation, with
CSRF protection and a read-only mode; Redis is read afterwards to see what changed."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from platform_common.jobs.errors import JobNotFound
from platform_common.jobs.operations import show_job
from platform_common.jobs.queue import JobQueue, QueueState
from tests.console.conftest import (
    PREFIX,
    client_of,
    confirmed_form,
    console_app,
    csrf_token,
    make_dead_letters,
)
from tests.support.dead_letter_race import meanwhile

DEAD = f"{PREFIX}/types/dining/dead"


async def post(client: httpx.AsyncClient, path: str, **fields: Any) -> httpx.Response:
    return await client.post(f"{DEAD}/{path}", data=fields)


async def token(client: httpx.AsyncClient) -> str:
    return csrf_token((await client.get(DEAD)).text)


async def test_requeue_selected_after_confirmation(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    first, second, third = await make_dead_letters(queue, ["a", "b", "c"])
    csrf = await token(client)
    picked = {"csrf": csrf, "do": "requeue:selected", "error": "", "ids": [first, third]}
    confirm = await post(client, "confirm", **picked)
    assert confirm.status_code == 200
    assert "Requeue 2 dead letters?" in confirm.text
    assert await queue.dead_letters.count("dining") == 3  # nothing changed yet
    hidden = dict(re.findall(r'name="(do|count)" value="([^"]+)"', confirm.text))
    assert hidden == {"do": "requeue:selected", "count": "2"}
    done = await post(client, "act", **confirmed_form(confirm.text))
    assert done.status_code == 200
    assert "Requeued 2 of 2" in done.text
    dead = {letter.job_id for letter in await queue.dead_letters.list("dining")}
    assert dead == {second}
    assert (await show_job(queue, "dining", first)).state == QueueState.QUEUED


async def test_purge_all_matching_touches_at_most_the_confirmed_count(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    timeouts = await make_dead_letters(queue, ["TimeoutError 1", "TimeoutError 2"])
    [other] = await make_dead_letters(queue, ["ValueError"])
    csrf = await token(client)
    matching = {"csrf": csrf, "do": "purge:matching", "error": "TimeoutError"}
    confirm = await post(client, "confirm", **matching)
    assert "Purge 2 dead letters?" in confirm.text and "TimeoutError" in confirm.text
    assert all(j in confirm.text for j in timeouts)  # the sample names them
    # Confirmed for 1 (as if one more matched after the page was drawn): 1 purged, the oldest.
    done = await post(client, "act", **{**confirmed_form(confirm.text), "count": "1"})
    assert "Purged 1 of 1" in done.text
    left = {letter.job_id for letter in await queue.dead_letters.list("dining")}
    assert other in left and len(left & set(timeouts)) == 1


async def test_requeue_all_without_a_filter(queue: JobQueue, client: httpx.AsyncClient) -> None:
    await make_dead_letters(queue, ["a", "b"])
    csrf = await token(client)
    every = {"csrf": csrf, "do": "requeue:matching", "error": ""}
    confirm = await post(client, "confirm", **every)
    assert (
        "Every dead letter of dining" in confirm.text and "Requeue 2 dead letters?" in confirm.text
    )
    done = await post(client, "act", **confirmed_form(confirm.text))
    assert "Requeued 2 of 2" in done.text
    assert await queue.dead_letters.count("dining") == 0


async def test_the_true_count_says_what_was_no_longer_dead(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    first, second = await make_dead_letters(queue, ["a", "b"])
    csrf = await token(client)
    picked = {"csrf": csrf, "do": "purge:selected", "error": "", "ids": [first, second]}
    confirm = await post(client, "confirm", **picked)
    await queue.dead_letters.requeue("dining", [second])  # someone else was quicker
    done = await post(client, "act", **confirmed_form(confirm.text))
    assert "Purged 1 of 2" in done.text
    assert "1 was no longer a dead letter as shown" in done.text
    assert second in done.text  # named: left alone


@pytest.mark.parametrize("action", ["requeue", "purge"])
@pytest.mark.parametrize("error", ["", "TimeoutError"], ids=["all", "matching"])
async def test_a_confirmed_action_leaves_what_was_dead_lettered_after_the_count(
    queue: JobQueue, client: httpx.AsyncClient, action: str, error: str
) -> None:
    shown = await make_dead_letters(queue, [f"TimeoutError {n}" for n in range(5)])
    asked = {"csrf": await token(client), "do": f"{action}:matching", "error": error}
    confirm = await post(client, "confirm", **asked)
    assert f"{action.capitalize()} 5 dead letters?" in confirm.text
    # Between the count and the click: two of the five are requeued (and fail again:
    # new dead letters with old ids), three new jobs are dead-lettered, all matching.
    new = await meanwhile(queue, shown[:2], [f"TimeoutError new {n}" for n in range(3)])
    done = await post(client, "act", **confirmed_form(confirm.text))
    left = {letter.job_id for letter in await queue.dead_letters.list("dining")}
    assert left == {*shown[:2], *new}
    for job_id in shown[2:]:
        state = QueueState.QUEUED if action == "requeue" else None
        assert await _state(queue, job_id) == state
    past = "Requeued" if action == "requeue" else "Purged"
    assert f"<h1>{past} 3 of 5</h1>" in done.text
    assert f"{past} 3 of the 5 dead letters of dining shown" in done.text
    assert "2 were no longer dead letters as shown" in done.text
    assert "5 dead-lettered after " in done.text and "were left untouched" in done.text


async def _state(queue: JobQueue, job_id: str) -> QueueState | None:
    try:
        return (await show_job(queue, "dining", job_id)).state
    except JobNotFound:
        return None


async def test_a_confirmation_of_nothing_offers_no_button(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    await make_dead_letters(queue, ["a"])
    csrf = await token(client)
    confirm = await post(client, "confirm", csrf=csrf, do="purge:matching", error="zzz")
    assert "Purge 0 dead letters?" in confirm.text and "Nothing to do" in confirm.text
    assert f'action="{DEAD}/act"' not in confirm.text


@pytest.mark.parametrize("forged", ["", "0" * 64, "not-a-token"])
async def test_a_post_without_the_sessions_token_is_refused(
    queue: JobQueue, client: httpx.AsyncClient, forged: str
) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    await client.get(DEAD)  # a session, but not its token
    for path in ("confirm", "act"):
        response = await post(
            client, path, csrf=forged, do="purge:selected", error="", ids=job_id, count="1"
        )
        assert response.status_code == 403
        assert "security token is missing or stale" in response.text
    assert await queue.dead_letters.count("dining") == 1


async def test_a_token_from_another_session_is_refused(queue: JobQueue) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    app = console_app(queue)
    async with client_of(app) as attacker, client_of(app) as victim:
        stolen = await token(attacker)
        await victim.get(DEAD)
        response = await post(
            victim, "act", csrf=stolen, do="purge:selected", error="", ids=job_id, count="1"
        )
    assert response.status_code == 403
    assert await queue.dead_letters.count("dining") == 1


async def test_a_post_without_the_session_cookie_is_refused(queue: JobQueue) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    async with client_of(console_app(queue)) as client:
        csrf = await token(client)
        client.cookies.clear()  # a cross-site POST: SameSite=Strict keeps the cookie home
        response = await post(
            client, "act", csrf=csrf, do="purge:selected", error="", ids=job_id, count="1"
        )
    assert response.status_code == 403
    assert await queue.dead_letters.count("dining") == 1


async def test_the_same_secret_lets_tokens_verify_across_replicas(queue: JobQueue) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    secret = b"a-shared-secret-of-replicas"
    async with client_of(console_app(queue, secret=secret)) as one:
        csrf = await token(one)
        other = client_of(console_app(queue, secret=secret))
        other.cookies = one.cookies
        async with other:
            response = await post(
                other, "confirm", csrf=csrf, do="requeue:selected", error="", ids=job_id
            )
    assert response.status_code == 200 and "Requeue 1 dead letter?" in response.text


async def test_read_only_hides_and_refuses_every_change(queue: JobQueue) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    secret = b"one-secret-two-consoles"
    writable = client_of(console_app(queue, secret=secret))
    async with client_of(console_app(queue, read_only=True, secret=secret)) as client:
        dead = await client.get(DEAD)
        job = await client.get(f"{PREFIX}/types/dining/jobs/{job_id}")
        for page in (dead.text, job.text):
            assert 'method="post"' not in page and 'name="do"' not in page
            assert 'type="checkbox"' not in page and "read-only" in page
        # Even a valid session and token (from a writable console sharing the secret).
        writable.cookies = client.cookies
        async with writable:
            csrf = await token(writable)
        for path in ("confirm", "act"):
            response = await post(
                client, path, csrf=csrf, do="purge:selected", error="", ids=job_id, count="1"
            )
            assert response.status_code == 403 and "read-only" in response.text
    assert await queue.dead_letters.count("dining") == 1


@pytest.mark.parametrize(
    ("fields", "status", "problem"),
    [
        ({"do": "delete:selected", "ids": "x"}, 400, "do: must be"),
        ({"do": "requeue:everything"}, 400, "do: must be"),
        ({"do": "requeue:selected"}, 400, "no dead letter selected"),
        ({"do": "requeue:matching", "error": "x" * 501}, 400, "at most 500"),
    ],
)
async def test_malformed_forms_are_refused(
    queue: JobQueue, client: httpx.AsyncClient, fields: dict[str, str], status: int, problem: str
) -> None:
    csrf = await token(client)
    response = await post(client, "confirm", csrf=csrf, **{"error": "", **fields})
    assert response.status_code == status and problem in response.text


async def test_act_needs_the_confirmed_count(queue: JobQueue, client: httpx.AsyncClient) -> None:
    csrf = await token(client)
    response = await post(client, "act", csrf=csrf, do="requeue:matching", error="", count="lots")
    assert response.status_code == 400 and "confirmed count" in response.text


async def test_only_forms_are_accepted(client: httpx.AsyncClient) -> None:
    await token(client)
    response = await client.post(f"{DEAD}/confirm", json={"do": "purge:matching"})
    assert response.status_code == 415
    huge = await client.post(
        f"{DEAD}/confirm", content=b"a=" + b"x" * 300_000,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    assert huge.status_code == 413


async def test_unknown_agent_type_posts_are_404(client: httpx.AsyncClient) -> None:
    csrf = await token(client)
    response = await client.post(
        f"{PREFIX}/types/nope/dead/confirm", data={"csrf": csrf, "do": "purge:matching"}
    )
    assert response.status_code == 404


@pytest.mark.parametrize(
    "origin",
    ["https://attacker.example", "null", "http://console.test:8080", "https://console.test"],
)
async def test_a_form_posted_from_another_origin_is_refused(
    queue: JobQueue, client: httpx.AsyncClient, origin: str
) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    csrf = await token(client)  # the session's own token: only the Origin is foreign
    fields = {"csrf": csrf, "do": "purge:selected", "error": "", "ids": job_id, "count": "1"}
    for path in ("confirm", "act"):
        response = await client.post(f"{DEAD}/{path}", data=fields, headers={"origin": origin})
        assert response.status_code == 403, response.text
        assert "posted from another site" in response.text
    assert await queue.dead_letters.count("dining") == 1


@pytest.mark.parametrize("origin", ["http://console.test", "HTTP://Console.Test:80"])
async def test_a_form_posted_from_the_consoles_own_origin_is_accepted(
    queue: JobQueue, client: httpx.AsyncClient, origin: str
) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    csrf = await token(client)
    fields = {"csrf": csrf, "do": "purge:selected", "error": "", "ids": job_id}
    confirm = await client.post(f"{DEAD}/confirm", data=fields, headers={"origin": origin})
    assert confirm.status_code == 200 and "Purge 1 dead letter?" in confirm.text
    done = await client.post(
        f"{DEAD}/act", data={**fields, "count": "1"}, headers={"origin": origin}
    )
    assert "Purged 1 of 1" in done.text
    assert await queue.dead_letters.count("dining") == 0
