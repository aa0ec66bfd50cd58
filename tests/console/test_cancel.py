"""The console's Cancel button on a job's page: shown for a job that has not finished,
hidden in read-only mode, checked as the pause and dead-letter forms are (CSRF token,
Origin); Redis is read afterwards to see what changed."""

from __future__ import annotations

import httpx
import pytest

from platform_common.jobs.queue import JobQueue, QueueState
from tests.console.conftest import PREFIX, client_of, console_app, csrf_token
from tests.support.queue_handlers import make_job

BUTTON = "Cancel this job</button>"


def pages(job_id: str) -> tuple[str, str]:
    return f"{PREFIX}/types/dining/jobs/{job_id}", f"{PREFIX}/types/dining/cancel/{job_id}"


async def test_cancel_from_the_jobs_page(queue: JobQueue, client: httpx.AsyncClient) -> None:
    job_id = await queue.enqueue(make_job())
    page, action = pages(job_id)
    shown = (await client.get(page)).text
    assert BUTTON in shown
    done = await client.post(action, data={"csrf": csrf_token(shown), "reason": "not needed"})
    assert done.status_code == 200 and "Cancelled: it was waiting" in done.text
    result = await queue.get_result(job_id, "dining")
    assert result is not None and result.status == QueueState.CANCELLED
    assert result.error == "not needed"
    after = (await client.get(page)).text
    assert "state-cancelled" in after and "not needed" in after and BUTTON not in after
    again = await client.post(action, data={"csrf": csrf_token(shown)})
    assert "It had already finished (cancelled)" in again.text


async def test_read_only_hides_the_button_and_refuses_a_cancel(queue: JobQueue) -> None:
    job_id = await queue.enqueue(make_job())
    page, action = pages(job_id)
    secret = b"one-secret-two-consoles"
    async with client_of(console_app(queue, read_only=True, secret=secret)) as client:
        assert BUTTON not in (await client.get(page)).text
        writable = client_of(console_app(queue, secret=secret))
        writable.cookies = client.cookies
        async with writable:
            csrf = csrf_token((await writable.get(page)).text)
        refused = await client.post(action, data={"csrf": csrf})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert await queue.get_result(job_id, "dining") is None


@pytest.mark.parametrize(
    ("fields", "headers", "status", "problem"),
    [
        ({"csrf": "0" * 64}, {}, 403, "security token is missing or stale"),
        ({}, {"origin": "https://attacker.example"}, 403, "posted from another site"),
        ({"reason": "r" * 1001}, {}, 400, "reason: longer than 1000"),
    ],
)
async def test_a_forged_or_malformed_cancel_is_refused(
    queue: JobQueue,
    client: httpx.AsyncClient,
    fields: dict[str, str],
    headers: dict[str, str],
    status: int,
    problem: str,
) -> None:
    job_id = await queue.enqueue(make_job())
    page, action = pages(job_id)
    csrf = csrf_token((await client.get(page)).text)
    response = await client.post(action, data={"csrf": csrf, **fields}, headers=headers)
    assert response.status_code == status and problem in response.text
    assert await queue.get_result(job_id, "dining") is None
