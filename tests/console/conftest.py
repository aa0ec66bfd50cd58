"""The console over a real redis-server: an app mounting it under /console, an HTTP
client that keeps its cookies as a browser does, and dead letters made by a real worker."""

from __future__ import annotations

import html
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from platform_common.jobs.console import console_router
from platform_common.jobs.queue import JobQueue
from tests.support.dead_letter_race import make_dead_letters as make_dead_letters
from tests.support.queue_runtime import fast_settings
from tests.support.ready_process import start_until_ready
from tests.support.redis_server import find_free_port

PREFIX = "/console"
HOSTILE = "<script>alert('owned')</script>"
"""Stored in payloads and errors: the pages must show it as text."""

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def allow_everyone() -> None:
    """The host app's authentication in these tests: lets every request through."""


def console_app(queue: JobQueue, **options: Any) -> FastAPI:
    options.setdefault("auth_dependency", allow_everyone)
    app = FastAPI()
    app.include_router(console_router(queue, **options), prefix=PREFIX)
    return app


def client_of(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test")


def csrf_token(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "the page has no form token"
    return match[1]


def confirmed_form(confirmation: str) -> dict[str, Any]:
    """The fields the confirmation page's button posts, as a browser sends them (the
    ids a list, the rest one value each)."""
    fields: dict[str, Any] = {}
    for name, value in _HIDDEN.findall(confirmation):
        if name == "ids":
            fields.setdefault("ids", []).append(html.unescape(value))
        else:
            fields[name] = html.unescape(value)
    assert "count" in fields, "the page has no confirmation form"
    return fields


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[JobQueue]:
    async with await JobQueue.connect(fast_settings(redis_url, max_attempts=1)) as opened:
        yield opened


@pytest.fixture
async def client(queue: JobQueue) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(console_app(queue)) as opened:
        yield opened


@contextmanager
def served_console(redis_url: str, log_dir: Path, *options: str) -> Iterator[str]:
    """`agentjobs console` in a child process until the block ends; yields its base URL."""
    port = find_free_port()
    args = [
        sys.executable, "-m", "platform_common.jobs", "console", "--port", str(port),
        "--redis-url", redis_url, *options,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    process = start_until_ready(
        args, log_dir / "console.log", url, name="agentjobs console",
        error=AssertionError, timeout=30,
    )  # fmt: skip
    try:
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
