"""Every failed attempt is visible: one rate-limited WARNING per attempt (traceback at
DEBUG), a bounded traceback in the job's history, text that always round-trips, the
real cause in the dead letter (a corrupt stored job included), and JSON log lines."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.queue.log_text import MAX_TRACEBACK_LENGTH, RateLimit
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import Worker
from platform_common.jobs.worker.attempt_calls import MAX_ERROR_LENGTH
from platform_common.jobs.worker.attempt_log import AttemptLog, JsonFormatter
from tests.support.queue_handlers import behaviour, make_job
from tests.support.queue_runtime import eventually, running_worker
from tests.support.stored_jobs import to_job_hash
from tests.support.workers import FAST_SETTINGS, ROOT, wait_until

DINING = QueueKeys("dining")
CONSUMER = "platform_common.jobs.worker"


async def history(client: RedisClient, job_id: str) -> list[dict[str, Any]]:
    return list(json.loads(await client.hget(DINING.job(job_id), "history") or "[]"))


def attempt_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("attempt failed")]


@pytest.mark.single_node("what the worker logs of a failed attempt, whatever Redis it uses")
async def test_each_failed_attempt_of_a_poison_job_is_one_warning_with_a_debug_traceback(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def poison(job: JobPayload) -> None:
        raise RuntimeError(f"boom {current_job().attempt}")

    job = make_job()
    await queue.enqueue(job)
    caplog.set_level("DEBUG", logger=CONSUMER)
    async with running_worker(queue.settings, poison):
        await eventually(lambda: queue.get_result(job["job_id"]))
    lines = attempt_lines(caplog)
    assert [r.levelname for r in lines] == ["WARNING"] * 3
    assert [r.getMessage() for r in lines] == [
        f"attempt failed job={job['job_id']} agent_type=dining attempt={n}/3 outcome={outcome} "
        f"error=RuntimeError: boom {n}"
        for n, outcome in ((1, "retrying"), (2, "retrying"), (3, "dead"))
    ]
    assert [(r.job_id, r.attempt, r.error_type) for r in lines] == [  # type: ignore[attr-defined]
        (job["job_id"], n, "RuntimeError") for n in (1, 2, 3)
    ]
    tracebacks = [r.getMessage() for r in caplog.records if r.levelname == "DEBUG"]
    tracebacks = [t for t in tracebacks if t.startswith(f"traceback of job={job['job_id']}")]
    assert len(tracebacks) == 3 and all("raise RuntimeError" in t for t in tracebacks)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    entries = await history(redis_client, job["job_id"])
    assert [e["error"] for e in entries] == [f"RuntimeError: boom {n}" for n in (1, 2, 3)]
    assert all("in poison" in e["traceback"] and "RuntimeError" in e["traceback"] for e in entries)


@pytest.mark.queue(max_attempts=1)  # one attempt per job (set when it is enqueued)
async def test_error_text_and_traceback_are_bounded_and_any_text_round_trips(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise ValueError("x" * 50_000)
        deep(n - 1)

    async def nasty(job: JobPayload) -> None:
        if job.task == "deep":
            deep(200)
        raise RuntimeError("lone surrogate \udc80 and \ud800 in the text, ünïcödé kept")

    deep_job, surrogate = make_job(task="deep"), make_job(task="surrogate")
    await queue.enqueue_many([deep_job, surrogate])
    caplog.set_level("INFO", logger=CONSUMER)
    async with running_worker(queue.settings, nasty):
        for job in (deep_job, surrogate):
            await eventually(lambda job=job: queue.get_result(job["job_id"]))
    (deep_entry,) = await history(redis_client, deep_job["job_id"])
    assert len(deep_entry["error"]) <= MAX_ERROR_LENGTH
    assert deep_entry["error"].startswith("ValueError: xxx")
    assert len(deep_entry["traceback"]) <= MAX_TRACEBACK_LENGTH
    assert deep_entry["traceback"].rstrip().endswith("x" * 100)  # its end is kept
    (entry,) = await history(redis_client, surrogate["job_id"])
    expected = "RuntimeError: lone surrogate \\udc80 and \\ud800 in the text, ünïcödé kept"
    assert entry["error"] == expected and entry["outcome"] == "error"
    letters = await queue.dead_letters.list("dining")
    assert {letter.job_id: letter.last_error for letter in letters}[surrogate["job_id"]] == expected
    assert "lease expired" not in json.dumps([letter.last_error for letter in letters])
    lines = [r.getMessage() for r in attempt_lines(caplog)]
    assert any(expected in line for line in lines)
    assert all(len(line) < 1000 for line in lines)  # a log line carries a shorter error


async def test_a_corrupt_stored_job_is_dead_lettered_with_the_parse_error_alone(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A payload that does not parse (not JSON, or not even UTF-8, which the client
    could not decode), numeric fields that do not, and a packed value (the form of a job
    enqueued and not yet claimed) whose header does not: each such job ends dead-lettered
    on its first attempt, naming the problem; the jobs claimed with them run normally,
    and the worker task never dies (no 'never retrieved'). The payload faults are planted
    in the packed value; the field faults in a job hash (tests/support/stored_jobs.py
    to_job_hash: a requeued job, or one of the previous layout), whose fields each have
    a name to give."""
    good = [make_job(task=f"good {i}") for i in range(3)]
    bad_payload, bad_bytes, bad_max, bad_expiry, bad_ttl, zero_ttl = (make_job() for _ in range(6))
    bad_header, bad_range = make_job(), make_job()
    # In the packed value: what replaces the payload, or a header field by position.
    packed: dict[str, tuple[str, str | bytes, str]] = {
        bad_payload["job_id"]: ("payload", "{not json", "payload does not parse: JSONDecode"),
        bad_bytes["job_id"]: ("payload", b"\xff\xfe{", "payload of the job is not valid UTF-8"),
        bad_header["job_id"]: ("expires_at", "soon", "stored packed job does not parse"),
        bad_range["job_id"]: ("ttl", "0", "stored packed job holds an out-of-range number"),
    }
    # In the job hash: field -> value.
    hashed: dict[str, tuple[str, str, str]] = {
        bad_max["job_id"]: ("max_attempts", "three", "max_attempts of the job does not parse"),
        bad_expiry["job_id"]: ("expires_at", "soon", "expires_at of the job does not parse"),
        bad_ttl["job_id"]: ("ttl", "\x00\xff", "ttl of the job does not parse"),
        # (reads as 60, but SET EX refuses it as stored: its completion could not be
        # recorded, so the claim holds it as corrupt before the handler runs)
        zero_ttl["job_id"]: ("ttl", "060", "ttl of the job does not parse: '060'"),
    }
    corrupt = {job_id: fault[2] for job_id, fault in (*packed.items(), *hashed.items())}
    jobs = [good[0], bad_payload, good[1], bad_bytes, bad_max, bad_expiry, bad_header]
    jobs += [bad_ttl, bad_range, zero_ttl, good[2]]
    await queue.enqueue_many(jobs)
    header_fields = ["enqueued_at", "expires_at", "ttl", "max_attempts", "nonce"]
    for job_id, (field, value, _) in packed.items():
        header, trace, payload = (await redis_client.hget(DINING.queued, job_id)).split("\n", 2)
        if field == "payload":
            planted = f"{header}\n{trace}\n".encode() + (
                value if isinstance(value, bytes) else value.encode()
            )
        else:
            numbers = header.split(",")
            numbers[header_fields.index(field)] = str(value)
            planted = f"{','.join(numbers)}\n{trace}\n{payload}".encode()
        await redis_client.hset(DINING.queued, job_id, planted)  # type: ignore[arg-type]
    for job_id, (field, value, _) in hashed.items():
        await to_job_hash(redis_client, DINING, job_id)
        await redis_client.hset(DINING.job(job_id), field, value)

    async def echo(job: JobPayload) -> str:
        return job.task

    caplog.set_level("INFO")
    async with running_worker(queue.settings, echo) as worker:
        results = {
            job["job_id"]: await eventually(lambda job=job: queue.get_result(job["job_id"]))
            for job in jobs
        }
    assert [results[job["job_id"]].result for job in good] == ["good 0", "good 1", "good 2"]
    dead = await redis_client.lrange(DINING.dead, 0, -1)
    assert sorted(dead) == sorted(corrupt)
    for job_id, problem in corrupt.items():
        assert results[job_id].status == "failed"
        (entry,) = await history(redis_client, job_id)  # one attempt: no retry can help
        assert entry["outcome"] == "corrupt"
        assert problem in entry["error"], entry
    assert worker.counts["succeeded"] == 3 and worker.counts["dead"] == len(corrupt)
    assert worker.counts["lost"] == 0
    counters = (await queue.stats("dining")).counters
    assert (counters["dead_lettered"], counters["retried"], counters["completed"]) == (
        len(corrupt), 0, 3,
    )  # fmt: skip
    # Every job left the packed form, and its arrival count with it.
    assert await redis_client.hlen(DINING.queued) == 0
    assert await redis_client.hlen(DINING.arrived) == 0
    assert await redis_client.zcard(DINING.arrivals) == 0
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_the_line_of_a_payload_that_is_not_utf8_names_its_attempt(
    queue: JobQueue, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim's attempt numbers parsed before the payload failed to decode: the
    WARNING says attempt=1/N, not ?/?."""
    job = make_job()
    await queue.enqueue(job)
    header, trace, _ = (await redis_client.hget(DINING.queued, job["job_id"])).split("\n", 2)
    planted = f"{header}\n{trace}\n".encode() + b"\xff\xfe{"
    await redis_client.hset(DINING.queued, job["job_id"], planted)  # type: ignore[arg-type]

    async def echo(payload: JobPayload) -> str:
        return payload.task

    caplog.set_level("WARNING", logger=CONSUMER)
    async with running_worker(queue.settings, echo):
        outcome = await eventually(lambda: queue.get_result(job["job_id"]))
    assert outcome.status == "failed"
    (line,) = attempt_lines(caplog)
    max_attempts = queue.settings.max_attempts
    assert line.getMessage().startswith(
        f"attempt failed job={job['job_id']} agent_type=dining attempt=1/{max_attempts} "
        "outcome=dead error=CorruptJob: stored payload of the job is not valid UTF-8"
    ), line.getMessage()
    assert (getattr(line, "attempt", None), getattr(line, "max_attempts", None)) == (
        1, max_attempts,
    )  # fmt: skip


@pytest.mark.queue(max_attempts=1)  # one attempt per job (set when it is enqueued)
async def test_a_poison_flood_is_rate_limited_with_a_count_of_lines_left_out(
    queue: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    async def poison(job: JobPayload) -> None:
        raise RuntimeError("poison")

    jobs = [make_job() for _ in range(12)]
    await queue.enqueue_many(jobs)
    caplog.set_level("INFO", logger=CONSUMER)
    worker = Worker(queue.settings, "dining", poison, concurrency=4)
    # A window longer than the test: which lines pass does not depend on timing.
    worker.attempt_log = AttemptLog(logging.getLogger(CONSUMER), limit=3, window=3600)
    run = asyncio.create_task(worker.run())
    await eventually(lambda: _dead(queue, 12))
    worker.stop()
    await run
    lines = attempt_lines(caplog)
    assert len(lines) == 3
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("suppressed")]
    assert summary == [
        "suppressed 9 attempt-failure lines of agent_type=dining (at most 3 per 3600s)"
    ]
    assert worker.attempt_log.logged + worker.attempt_log.suppressed == 12


async def _dead(queue: JobQueue, expected: int) -> bool:
    return await queue.dead_letters.count("dining") == expected


def test_rate_limit_reports_what_it_left_out_on_the_next_line() -> None:
    now = [0.0]
    limit = RateLimit(2, 10.0, clock=lambda: now[0])
    assert [limit.allow("dining") for _ in range(5)] == [
        (True, 0), (True, 0), (False, 0), (False, 0), (False, 0),
    ]  # fmt: skip
    assert limit.allow("flights") == (True, 0)  # per agent type
    assert limit.take_suppressed() == {}  # its window is still open
    now[0] = 10.0
    assert limit.allow("dining") == (True, 3)
    assert limit.allow("dining") == (True, 0)
    assert limit.allow("dining") == (False, 0)
    assert limit.take_suppressed(only_closed=False) == {"dining": 1}


def test_json_lines_carry_the_same_fields_and_survive_any_text() -> None:
    record = logging.LogRecord(
        "platform_common.jobs.worker", logging.WARNING, __file__, 1,
        "attempt failed job=%s error=%s", ("j1", "bad \udc80"), None,
    )  # fmt: skip
    record.job_id, record.attempt = "j1", 2
    line = JsonFormatter().format(record)
    line.encode("ascii")  # nothing the stream could refuse
    entry = json.loads(line)
    assert entry["message"] == "attempt failed job=j1 error=bad \udc80"
    assert (entry["level"], entry["job_id"], entry["attempt"]) == ("WARNING", "j1", 2)


@pytest.mark.single_node("what the worker logs of a failed attempt, whatever Redis it uses")
def test_the_worker_cli_logs_json_lines(redis_url: str, tmp_path: Path) -> None:
    job = make_job(constraints=behaviour("fail"))

    async def enqueue() -> None:
        async with await JobQueue.connect(redis_url) as job_queue:
            await job_queue.enqueue(job)

    log_path = tmp_path / "worker.log"
    env = {"PYTHONPATH": str(ROOT), "QUEUE_REDIS_URL": redis_url, **FAST_SETTINGS}
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "platform_common.jobs.worker", "--agent-type", "dining",
             "--handler", "tests.support.queue_handlers:behave", "--log-format", "json"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        asyncio.run(enqueue())
        wait_until(lambda: "attempt failed" in log_path.read_text(), 60)
    finally:
        worker.terminate()
        code = worker.wait(30)
    assert code == 0
    entries = [json.loads(line) for line in log_path.read_text().splitlines()]  # every line
    failed = [e for e in entries if e["message"].startswith("attempt failed")]
    fields = ("level", "job_id", "agent_type", "attempt", "max_attempts", "outcome", "error")
    assert {k: failed[0][k] for k in fields} == {
        "level": "WARNING", "job_id": job["job_id"], "agent_type": "dining", "attempt": 1,
        "max_attempts": 3, "outcome": "retrying", "error": "RuntimeError: boom on attempt 1",
    }  # fmt: skip
    assert failed[0]["error_type"] == "RuntimeError"
    assert any(e["message"].startswith("worker ready") for e in entries)
