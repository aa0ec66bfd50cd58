"""docs/protocol.md, proven: its shell blocks run as written, in bash, with `redis-cli`
alone (no part of this package), against real Redis (single node and cluster), beside
a Python worker and a Python producer: a job enqueued by the page's commands is run by
a Python worker, and jobs a Python producer waits for are taken, claimed, renewed and
completed (or failed) by them. And an id pushed with a plain LPUSH, which no worker can
run, is counted and logged by the worker that drops it, not dropped in silence."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue
from tests.docs.code_blocks import code_blocks
from tests.support.paths import REPO_ROOT
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.worker_records import SyncClient

PROTOCOL = REPO_ROOT / "docs" / "protocol.md"
LUA_DIR = REPO_ROOT / "platform_common" / "jobs" / "lua"
DINING = QueueKeys("dining")


def blocks() -> dict[str, str]:
    """The page's shell blocks this test runs (those tests/docs/test_examples.py leaves to
    it), by their first line (a comment naming the step)."""
    named: dict[str, str] = {}
    for block in code_blocks(PROTOCOL):
        if block.runs_as == "sh" and block.marker == "not-run":
            named[block.code.split("\n", 1)[0].removeprefix("# ")] = block.code
    return named


STEPS = blocks()


def test_the_page_has_the_steps_this_test_runs() -> None:
    assert sorted(STEPS) == sorted(
        [
            "Load the scripts",
            "Enqueue a job",
            "Read the outcome",
            "Take and claim a job",
            "Heartbeat and renew the lease while the handler runs",
            "Report progress",
            "Complete the job",
            "Fail the job for good",
        ]
    )


def redis_cli(redis_url: str) -> str:
    """`$REDIS` as the page describes it: redis-cli and its connection options."""
    parts = urlsplit(redis_url)
    host, _, port = parts.netloc.split(",")[0].rpartition(":")
    binary = shutil.which("redis-cli")
    assert binary is not None, "redis-cli is installed with redis-server"
    cluster = " -c" if "cluster=true" in parts.query else ""
    return f"{binary}{cluster} -h {host} -p {port}"


async def run_steps(redis_url: str, steps: list[str], env: Mapping[str, str]) -> str:
    """The named blocks, in order, as one bash script (`set -eu`: a failing command or a
    variable the page does not say to set fails it), in a thread; its stdout."""
    return await asyncio.to_thread(_run_steps, redis_url, steps, env)


def _run_steps(redis_url: str, steps: list[str], env: Mapping[str, str]) -> str:
    script = "set -eu\n" + "\n".join(STEPS[step] for step in steps)
    variables = {"REDIS": redis_cli(redis_url), "LUA_DIR": str(LUA_DIR), "TYPE": "dining"}
    done = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": os.environ["PATH"], **variables, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def foreign_job() -> tuple[dict[str, Any], dict[str, str]]:
    """A payload of the schema's shape, and the page's variables for it."""
    created = datetime.now(UTC).replace(microsecond=0)
    job = make_job(created_at=created.isoformat(), ttl_seconds=60)
    env = {
        "JOB_ID": job["job_id"],
        "PAYLOAD": json.dumps(job),
        "CREATED_MS": str(int(created.timestamp()) * 1000),
        "TTL": "60",
    }
    return job, env


async def test_a_job_enqueued_as_the_page_says_runs_on_a_python_worker(redis_url: str) -> None:
    job, env = foreign_job()
    ran: list[JobPayload] = []

    async def book(payload: JobPayload) -> dict[str, Any]:
        ran.append(payload)
        return {"booked": payload.curated_shortlist[0]}

    enqueued = await run_steps(redis_url, ["Load the scripts", "Enqueue a job"], env)
    assert enqueued.split() == ["ok", "1"]
    settings = fast_settings(redis_url)
    async with await JobQueue.connect(settings) as queue:
        assert "dining" in await queue.connection.client.smembers("jobs:types")
        async with running_worker(settings, book):

            async def outcome() -> str:
                return (await run_steps(redis_url, ["Read the outcome"], env)).strip()

            await eventually(outcome)
        stats = await queue.stats("dining")
    assert [(p.job_id, p.task, p.constraints) for p in ran] == [
        (job["job_id"], job["task"], job["constraints"])
    ]
    assert json.loads(await outcome()) == {
        "status": "succeeded",
        "result": {"booked": job["curated_shortlist"][0]},
        "error": None,
    }
    assert (stats.counters["enqueued"], stats.counters["completed"]) == (1, 1)


async def test_jobs_a_python_producer_waits_for_are_worked_as_the_page_says(
    redis_url: str,
) -> None:
    worker_steps = [
        "Load the scripts",
        "Take and claim a job",
        "Heartbeat and renew the lease while the handler runs",
    ]
    async with await JobQueue.connect(fast_settings(redis_url)) as queue:
        done_job, failed_job = make_job(), make_job()
        watched = [("dining", done_job["job_id"]), ("dining", failed_job["job_id"])]
        async with queue.completions(watch=watched) as completions:
            await queue.enqueue_many([done_job, failed_job])
            result = {"restaurants": ["den"], "note": "booked by a worker in another language"}
            identity = {"WORKER_ID": f"shell-worker-{uuid.uuid4().hex[:6]}"}
            report = {"checked": 1, "of": 3, "note": "ünï"}
            completed = await run_steps(
                redis_url,
                [*worker_steps, "Report progress", "Complete the job"],
                {**identity, "RESULT": json.dumps(result), "REPORT": json.dumps(report)},
            )
            # The replies of queue_progress (ok, its time) and queue_complete (ok).
            reported, at, done = completed.split()
            assert (reported, done) == ("ok", "ok")
            progress = await queue.progress("dining", done_job["job_id"])
            assert progress is not None and progress.data == report
            assert progress.at == int(at) / 1000
            failed_reply = await run_steps(
                redis_url,
                [*worker_steps, "Fail the job for good"],
                {**identity, "ERROR": "CardDeclined: the venue refused the card"},
            )
            assert failed_reply.split() == ["failed"]
            ended = {}
            async for outcome in completions:
                ended[outcome.job_id] = outcome.result
                if len(ended) == 2:
                    break
        succeeded, failed = ended[done_job["job_id"]], ended[failed_job["job_id"]]
        assert succeeded is not None and succeeded.ok and succeeded.result == result
        assert failed is not None and not failed.ok
        assert failed.error == "CardDeclined: the venue refused the card"
        [kept] = await queue.failed_jobs.list("dining")
        assert kept.job_id == failed_job["job_id"]
        stats = await queue.stats("dining")
        assert (stats.counters["started"], stats.counters["completed"]) == (2, 1)
        assert stats.counters["failed"] == 1 and stats.in_progress == 0
        workers = await queue.connection.client.zrange(DINING.workers, 0, -1)
        assert workers == [identity["WORKER_ID"]]


async def test_an_id_pushed_without_the_enqueue_script_is_counted_and_logged(
    redis_url: str, client: SyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="platform_common.jobs")
    settings = fast_settings(redis_url)
    async with await JobQueue.connect(settings) as queue:
        # A queue's own stray first: the entry of a job that ended, whose result is kept.
        finished = await queue.enqueue(make_job())
        async with running_worker(settings, _ok) as worker:

            async def ended() -> bool:
                return await queue.get_result(finished, "dining") is not None

            await eventually(ended)
            naive = [f"naive-{n}" for n in range(3)]
            # What a naive producer does: LPUSH the ids, and no job behind them.
            client.lpush(DINING.queue, finished, *naive)

            async def dropped() -> bool:
                lists = await queue.connection.execute_many(
                    [("LLEN", DINING.queue), ("LLEN", DINING.processing)]
                )
                return worker.foreign_entries == 3 and lists == [0, 0]

            await eventually(dropped)
    lines = [
        r.getMessage() for r in caplog.records if "queue entry without a job" in r.getMessage()
    ]
    assert len(lines) == 1, lines  # the first at once, the rest within the minute counted
    assert lines[0].startswith("queue entry without a job dropped: job=naive-")
    assert "agent_type=dining" in lines[0] and "docs/protocol.md" in lines[0]
    assert worker.foreign_entries == 3  # the finished job's stray entry is not counted


async def _ok(job: JobPayload) -> str:
    return "ok"
