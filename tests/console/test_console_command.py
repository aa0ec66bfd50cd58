"""`agentjobs console`: served standalone, read-only and on loopback unless told."""

from __future__ import annotations

from pathlib import Path

import httpx

from platform_common.jobs.queue import JobQueue
from tests.cli.runner import one_error_line, run
from tests.console.conftest import csrf_token, make_dead_letters, served_console


async def test_read_only_by_default(queue: JobQueue, redis_url: str, tmp_path: Path) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    with served_console(redis_url, tmp_path) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("types/dining/dead")
            assert page.status_code == 200 and job_id in page.text
            assert 'name="do"' not in page.text and "read-only" in page.text
            refused = await client.post(
                "types/dining/dead/act",
                data={"do": "purge:selected", "ids": job_id, "count": "1", "csrf": "x"},
            )
    assert refused.status_code == 403
    assert await queue.dead_letters.count("dining") == 1
    assert "console (read-only): http://127.0.0.1:" in (tmp_path / "console.log").read_text()


async def test_read_write_offers_the_forms(queue: JobQueue, redis_url: str, tmp_path: Path) -> None:
    await make_dead_letters(queue, ["a"])
    with served_console(redis_url, tmp_path, "--read-write") as base:
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("types/dining/dead")
    assert csrf_token(page.text) and 'name="do"' in page.text


def test_a_link_that_is_not_a_web_address_is_a_usage_error() -> None:
    done = run("console", "--runbook-url", "javascript:alert(1)")
    assert done.returncode == 2
    assert "must be an http(s) URL" in one_error_line(done)


def test_help_lists_the_console() -> None:
    done = run("--help")
    assert done.returncode == 0 and "console" in done.stdout
    options = run("console", "--help")
    assert "--read-write" in options.stdout and "127.0.0.1" in options.stdout
