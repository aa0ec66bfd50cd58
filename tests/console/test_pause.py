"""The console's pause and resume of an agent type: the state on its page and on the
overview, the buttons, and the same CSRF, origin and read-only checks as the dead-letter
actions; Redis is read afterwards to see what changed."""

from __future__ import annotations

import httpx
import pytest

from platform_common.jobs.queue import JobQueue
from tests.console.conftest import PREFIX, client_of, console_app, csrf_token

PAGE = f"{PREFIX}/types/dining"
PAUSE = f"{PAGE}/pause"


async def token(client: httpx.AsyncClient) -> str:
    return csrf_token((await client.get(PAGE)).text)


async def test_pause_then_resume_from_the_agent_types_page(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    page = (await client.get(PAGE)).text
    assert "Running: workers take its jobs." in page
    assert 'name="do" value="pause"' in page and 'value="resume"' not in page
    paused = await client.post(PAUSE, data={"csrf": csrf_token(page), "do": "pause"})
    assert paused.status_code == 200 and "dining is paused" in paused.text
    assert "Paused now" in paused.text
    assert (await queue.pause_state("dining")).paused
    page = (await client.get(PAGE)).text
    assert "<strong>Paused</strong> since" in page
    assert 'name="do" value="resume"' in page and 'value="pause"' not in page
    overview = (await client.get(f"{PREFIX}/")).text
    assert '<span class="alert paused">paused</span>' in overview
    again = await client.post(PAUSE, data={"csrf": csrf_token(page), "do": "pause"})
    assert "It was paused already, since" in again.text
    resumed = await client.post(PAUSE, data={"csrf": csrf_token(page), "do": "resume"})
    assert resumed.status_code == 200 and "Resumed (paused since" in resumed.text
    assert not (await queue.pause_state("dining")).paused
    assert "paused</span>" not in (await client.get(f"{PREFIX}/")).text


async def test_read_only_hides_the_buttons_and_refuses_a_pause(queue: JobQueue) -> None:
    secret = b"one-secret-two-consoles"
    async with client_of(console_app(queue, read_only=True, secret=secret)) as client:
        page = (await client.get(PAGE)).text
        assert 'method="post"' not in page and "Running: workers take its jobs." in page
        writable = client_of(console_app(queue, secret=secret))
        writable.cookies = client.cookies
        async with writable:
            csrf = await token(writable)  # a valid token of this session
        refused = await client.post(PAUSE, data={"csrf": csrf, "do": "pause"})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert not (await queue.pause_state("dining")).paused


@pytest.mark.parametrize("forged", ["", "0" * 64, "not-a-token"])
async def test_a_pause_without_the_sessions_token_is_refused(
    queue: JobQueue, client: httpx.AsyncClient, forged: str
) -> None:
    await client.get(PAGE)  # a session, but not its token
    response = await client.post(PAUSE, data={"csrf": forged, "do": "pause"})
    assert response.status_code == 403 and "security token is missing or stale" in response.text
    assert not (await queue.pause_state("dining")).paused


async def test_a_pause_posted_from_another_origin_is_refused(
    queue: JobQueue, client: httpx.AsyncClient
) -> None:
    csrf = await token(client)
    response = await client.post(
        PAUSE, data={"csrf": csrf, "do": "pause"}, headers={"origin": "https://attacker.example"}
    )
    assert response.status_code == 403 and "posted from another site" in response.text
    assert not (await queue.pause_state("dining")).paused


@pytest.mark.parametrize(
    ("path", "fields", "status", "problem"),
    [
        (PAUSE, {"do": "stop"}, 400, "do: must be pause or resume"),
        (PAUSE, {"do": "x" * 10_000}, 400, "do: must be pause or resume"),
        (PAUSE, {}, 400, "do: must be pause or resume"),
        (f"{PREFIX}/types/lodging/pause", {"do": "pause"}, 404, "unknown agent type"),
    ],
)
async def test_malformed_pause_forms_are_refused(
    queue: JobQueue,
    client: httpx.AsyncClient,
    path: str,
    fields: dict[str, str],
    status: int,
    problem: str,
) -> None:
    csrf = await token(client)
    response = await client.post(path, data={"csrf": csrf, **fields})
    assert response.status_code == status and problem in response.text
    assert not (await queue.pause_state("dining")).paused
    only_json = await client.post(PAUSE, json={"csrf": csrf, "do": "pause"})
    assert only_json.status_code == 415
