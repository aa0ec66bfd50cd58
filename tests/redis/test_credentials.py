"""Credentials never appear in logs, exceptions, metrics or /readyz bodies.

Real processes (a worker and the exporter, from their CLIs, at DEBUG log level) and
in-process clients run against an ACL-protected redis-server, once with the right
passwords and once with wrong ones and with Redis down; every log line, exception
(with its whole chain), HTTP body and repr is then searched for the passwords."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
from functools import partial
from pathlib import Path

import httpx
import pytest

from platform_common.jobs import JobsError, make_job_store
from platform_common.jobs.acl import acl_file_line
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually
from tests.support.redis_server import RedisServer, find_free_port
from tests.support.workers import ROOT, wait_until

SECRETS = {
    "producer": "Pr0ducer-s3cret-7f2a",
    "worker": "W0rker-s3cret-91c4",
    "exporter": "Exp0rter-s3cret-3d8e",
}
WRONG = "Wr0ng-but-still-s3cret-55aa"
EVERY_SECRET = (*SECRETS.values(), WRONG)


def assert_clean(text: str, where: str) -> None:
    for secret in EVERY_SECRET:
        assert secret not in text, f"a password leaked into {where}"
        # Also its URL-encoded and repr'd forms' core.
        assert secret[:12] not in text, f"part of a password leaked into {where}"


def chain(exc: BaseException) -> str:
    """The exception as a traceback prints it, causes and contexts included."""
    return "".join(traceback.format_exception(exc)) + repr(exc)


def role_users() -> list[str]:
    """The roles these tests connect as (tests/redis/conftest.py starts the server)."""
    return [acl_file_line(role, SECRETS[role], role).removeprefix("user ") for role in SECRETS]


def spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def test_a_working_system_never_prints_a_password(
    acl_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    password_file = tmp_path / "exporter.pw"
    password_file.write_text(SECRETS["exporter"] + "\n")
    exporter_url = f"redis://exporter@127.0.0.1:{acl_server.port}/0?password_file={password_file}"
    port = find_free_port()
    exporter = spawn(
        [
            "-m",
            "platform_common.jobs_exporter",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "debug",
        ],
        tmp_path / "exporter.log",
        {"REDIS_URL": exporter_url},
    )
    worker = spawn(
        ["-m", "platform_common.jobs.worker", "--agent-type", "dining", "--log-level", "DEBUG",
         "--handler", "platform_common.jobs.queue.builtin:echo",
         "--redis-url", acl_server.url_for("worker", SECRETS["worker"])],
        tmp_path / "worker.log",
        {"QUEUE_BLOCK_TIMEOUT": "0.2"},
    )  # fmt: skip
    bodies = []
    try:
        queue = await JobQueue.connect(acl_server.url_for("producer", SECRETS["producer"]))
        async with queue:
            jobs = [make_job(task=f"secret-free {i}") for i in range(3)]
            await queue.enqueue_many(jobs)
            for job in jobs:
                await eventually(partial(queue.get_result, job["job_id"]), within=60)
            bodies.append(repr(queue.settings))
        wait_until(lambda: _get(port, "/healthz") is not None, timeout=30)
        for path in ("/metrics", "/readyz", "/healthz", "/"):
            response = _get(port, path)
            assert response is not None and response.status_code == 200, path
            bodies.append(response.text)
        assert "jobs_completed_total" in bodies[1]
    finally:
        for process in (worker, exporter):
            process.terminate()
            process.wait(timeout=30)
    for index, body in enumerate(bodies):
        assert_clean(body, f"HTTP body / repr #{index}")
    assert_clean((tmp_path / "worker.log").read_text(errors="replace"), "the worker's log")
    assert_clean((tmp_path / "exporter.log").read_text(errors="replace"), "the exporter's log")
    assert_clean(caplog.text, "this process's log")
    assert "worker ready" in (tmp_path / "worker.log").read_text()  # the logs are real


async def test_wrong_passwords_and_a_dead_redis_never_print_a_password(
    acl_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = acl_server.url_for("producer", WRONG)
    dead = f"redis://producer:{WRONG}@127.0.0.1:{find_free_port()}/0"
    texts: list[tuple[str, str]] = []
    for url in (wrong, dead):
        store = make_job_store(url, agent="creds-agent")
        try:
            with pytest.raises(JobsError) as caught:
                await store.get("job-1")
            texts += [(chain(caught.value), "a JobStore error"), (repr(store), "a store repr")]
        finally:
            await store.close()
        with pytest.raises(Exception) as queue_error:
            await JobQueue.connect(QueueSettings.from_url(url))
        texts.append((chain(queue_error.value), "a queue connect error"))

        app = create_app(ExporterSettings.from_args(["--redis-url", url, "--redis-timeout", "1"]))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as http:
            ready = await http.get("/readyz")
            metrics = await http.get("/metrics")
        await app.state.exporter.aclose()
        assert ready.json()["redis"] == "unreachable"
        assert "queue_exporter_redis_up 0.0" in metrics.text
        texts += [(ready.text, "/readyz"), (metrics.text, "/metrics")]

    texts.append((caplog.text, "this process's log"))
    for text, where in texts:
        assert_clean(text, where)


def test_a_worker_refused_by_redis_does_not_print_the_password(acl_server: RedisServer) -> None:
    failed = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs.worker", "--agent-type", "dining",
         "--handler", "platform_common.jobs.queue.builtin:noop", "--log-level", "DEBUG",
         "--redis-url", acl_server.url_for("worker", WRONG)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "AuthenticationError" in output or "WRONGPASS" in output  # it did fail on auth
    assert_clean(output, "the refused worker's output")


def _get(port: int, path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    except httpx.HTTPError:
        return None
