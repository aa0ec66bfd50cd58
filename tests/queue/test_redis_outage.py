"""Typed errors and quiet outages: the queue's API raises BackendUnavailable naming the
redacted URL, a worker reports an outage once when it starts and once when it ends, and
a worker started against a dead Redis exits with one line."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest

from platform_common.jobs.errors import BackendUnavailable
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs.queue.backend_errors import TRANSIENT, RedisHealth
from platform_common.jobs.worker import Worker
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings
from tests.support.redis_server import RedisServer, find_free_port
from tests.support.workers import ROOT

PASSWORD = "s3cret-pw"
CONSUMER = "platform_common.jobs.worker"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A server of this test's own (it is stopped and restarted), with a password."""
    # The default user's password set as an ACL rule: the launcher then waits for the
    # port alone (its PING check has no password).
    with RedisServer(acl_users=[f"default on >{PASSWORD} ~* &* +@all"]) as redis_server:
        yield redis_server


def url_of(server: RedisServer) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"


def check_names_the_host_not_the_password(error: BackendUnavailable, port: int) -> None:
    text = str(error)
    assert f"127.0.0.1:{port}" in text and "unreachable" in text, text
    assert PASSWORD not in text


async def test_queue_operations_raise_backend_unavailable_naming_the_host(
    server: RedisServer,
) -> None:
    with pytest.raises(BackendUnavailable) as refused:
        await JobQueue.connect(f"redis://:{PASSWORD}@127.0.0.1:{find_free_port()}/0")
    assert PASSWORD not in str(refused.value)
    queue = await JobQueue.connect(fast_settings(url_of(server)))
    try:
        await queue.enqueue(make_job())  # reachable: works
        server.stop()
        operations: dict[str, Callable[[], Awaitable[object]]] = {
            "enqueue": lambda: queue.enqueue(make_job()),
            "enqueue_many": lambda: queue.enqueue_many([make_job(), make_job()]),
            "get_result": lambda: queue.get_result("some-job"),
            "get_record": lambda: queue.get_record("dining", "some-job"),
            "stats": lambda: queue.stats("dining"),
            "cleanup": lambda: queue.cleanup("dining"),
            "dead_letters.count": lambda: queue.dead_letters.count("dining"),
            "dead_letters.list": lambda: queue.dead_letters.list("dining"),
        }
        # All at once: each spends the client's reconnects and backoff (about 1.5 s)
        # before it gives up, and none waits for another to.
        outcomes = await asyncio.gather(
            *(operation() for operation in operations.values()), return_exceptions=True
        )
        for name, outcome in zip(operations, outcomes, strict=True):
            assert isinstance(outcome, BackendUnavailable), (name, outcome)
            check_names_the_host_not_the_password(outcome, server.port)
            assert outcome.__cause__ is not None, name
        assert await queue.ping() is False
    finally:
        await queue.aclose()


async def test_a_worker_reports_an_outage_once_when_it_starts_and_once_when_it_ends(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def echo(job: JobPayload) -> str:
        return job.task

    settings = fast_settings(url_of(server))
    caplog.set_level("DEBUG", logger=CONSUMER)
    worker = Worker(settings, "dining", echo)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 20)
    server.stop()

    async def many_failures() -> bool:
        # Every loop (fetch, reaper, promoter, heartbeat, ...) has failed, several times.
        return worker.health.failures >= 15

    await eventually(many_failures, within=60)
    server.start()

    async def recovered() -> bool:
        return not worker.health.down

    await eventually(recovered, within=60)
    queue = await JobQueue.connect(settings)
    try:
        job = make_job(task="after the outage")
        await queue.enqueue(job)
        done = await eventually(lambda: queue.get_result(job["job_id"]))
    finally:
        await queue.aclose()
    worker.stop()
    await run
    assert done.ok and done.result == "after the outage"
    loud = [r for r in caplog.records if r.name == CONSUMER and r.levelno >= logging.WARNING]
    messages = [r.getMessage() for r in loud]
    assert len(messages) == 2, messages
    down, up = messages
    assert down.startswith(f"Redis at redis://:***@127.0.0.1:{server.port}/0 unreachable (")
    assert up.startswith(f"Redis at redis://:***@127.0.0.1:{server.port}/0 reachable again after ")
    assert "failed calls)" in up and worker.health.outages == 1
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)
    # The failures in between went to DEBUG.
    assert sum("still unreachable" in r.getMessage() for r in caplog.records) >= 14


async def test_an_outage_is_reported_from_its_first_failed_call(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # As a worker loop reports its calls, through the worker's own client: the first
    # failed call spends the client's reconnects and backoff before it fails, and the
    # outage it reports must cover that time too.
    settings = fast_settings(url_of(server))
    health = RedisHealth(logging.getLogger(CONSUMER), settings.redis)
    client = settings.redis.make_client()
    caplog.set_level("WARNING", logger=CONSUMER)
    try:
        await client.ping()
        health.ok()
        server.stop()
        first_call = time.monotonic()
        with pytest.raises(TRANSIENT) as failure:
            await client.ping()
        health.failed("pinging", failure.value)
        server.start()
        await client.ping()
        recovered = time.monotonic()
        health.ok()
    finally:
        await client.aclose()
    [up] = [r for r in caplog.records if "reachable again after" in r.getMessage()]
    reported = float(up.__dict__["outage_seconds"])  # the line's structured field
    # round() is monotonic: the field is rounded to ms, so is what it must cover.
    assert reported >= round(recovered - first_call, 3), (reported, recovered - first_call)


@pytest.mark.parametrize("cluster", [False, True], ids=["single", "cluster"])
def test_a_worker_started_against_a_dead_redis_exits_with_one_line(cluster: bool) -> None:
    port = find_free_port()
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0" + ("?cluster=true" if cluster else "")
    done = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs.worker", "--agent-type", "dining",
         "--handler", "platform_common.jobs.queue.builtin:echo", "--redis-url", url],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    (line,) = lines
    cause = "RedisClusterException" if cluster else "ConnectionError"
    assert line.startswith(f"error: Redis: {cause}: redis://:***@127.0.0.1:{port}/0"), line
    assert "unreachable" in line and PASSWORD not in line
