"""The operator commands (`info`, `workers`, `job show`, `dead ...`, `failed ...`) against
real Redis:
in-process through `cli.main` for speed, as child processes where the terminal, the
exit path or a running watch matter. Destructive commands run with --dry-run first, and
Redis is read afterwards to see what really changed."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from platform_common.jobs.cli import root
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.operations.formatting import timestamp
from platform_common.jobs.queue import JobQueue
from tests.cli.jobs_made import cannot_book, dead_letters, enqueue, failed_jobs
from tests.cli.runner import DEAD_REDIS, child_env, one_error_line, table_row
from tests.support.dead_letter_race import make_dead_letters, meanwhile
from tests.support.paths import REPO_ROOT
from tests.support.progress_jobs import reporting_job
from tests.support.queue_handlers import behaviour, make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.sync_redis import sync_reply
from tests.support.worker_records import SyncClient
from tests.support.workers import FAST_SETTINGS, WorkerGroup, wait_until

DINING = QueueKeys("dining")
RUN_AT = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)
"""Within the 60 s TTL of make_job's jobs, created now."""


def run_child(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "platform_common.jobs", *args],
        cwd=REPO_ROOT, env=child_env({"COLUMNS": "200"}), capture_output=True, text=True,
        timeout=60, **kwargs,
    )  # fmt: skip


# -- the app ----------------------------------------------------------------------------
def test_help_lists_the_operator_commands() -> None:
    done = run_child("--help")
    assert done.returncode == 0, done.stderr
    for command in ("info", "workers", "job", "dead", "pause", "resume", "session"):
        assert f"│ {command} " in done.stdout
    job = run_child("job", "--help")
    for command in ("show", "cancel"):
        assert f"│ {command} " in job.stdout
    dead = run_child("dead", "--help")
    for command in ("list", "show", "requeue", "purge"):
        assert f"│ {command} " in dead.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["info", "dining", "lodging"],
        ["workers", "lodging"],
        ["job", "show", "lodging", "some-id"],
        ["dead", "list", "lodging"],
        ["dead", "show", "lodging", "some-id"],
        ["dead", "requeue", "lodging", "--all", "--dry-run"],
        ["dead", "purge", "lodging", "--all", "--yes"],
        ["pause", "lodging"],
        ["resume", "lodging"],
        ["limits", "show", "lodging"],
        ["limits", "set", "lodging", "--max-running", "3"],
        ["job", "cancel", "lodging", "some-id"],
    ],
)
def test_an_unknown_agent_type_is_one_line_and_exit_2(agentjobs: Any, args: list[str]) -> None:
    done = agentjobs(*args)
    assert done.code == 2
    assert done.err == (
        "error: agent_type: unknown agent type 'lodging': not configured and never seen in "
        "Redis (jobs:types); known: dining, dmc, experiences, flights, transportation\n"
    )


def billing_jobs(redis_url: str, count: int) -> list[str]:
    """Jobs of `billing`, a type this operator's QUEUE_AGENT_TYPES does not name, enqueued
    by a producer configured for it (which registers it in Redis, as every producer does)."""

    async def make() -> list[str]:
        settings = fast_settings(redis_url, agent_types=("billing",))
        async with await JobQueue.connect(settings) as queue:
            return await queue.enqueue_many([make_job("billing") for _ in range(count)])

    return asyncio.run(make())


def test_a_type_redis_has_seen_is_known_though_not_configured(
    agentjobs: Any, redis_url: str
) -> None:
    ids = billing_jobs(redis_url, 2)
    listed = agentjobs("info", "-o", "json").json()
    names = [t["agent_type"] for t in listed["types"]]
    # Configured first, in their order, then those Redis has seen: the exporter's order.
    assert names == ["dining", "experiences", "transportation", "flights", "dmc", "billing"]
    assert listed["types"][-1]["queued"] == 2
    [billing] = agentjobs("info", "billing", "-o", "json").json()["types"]
    assert (billing["agent_type"], billing["queued"]) == ("billing", 2)
    table = agentjobs("info")
    assert table.code == 0 and table.err == "", table.err
    assert table_row(table.out, "billing")[1] == "2"
    shown = agentjobs("job", "show", "billing", ids[0], "-o", "json").json()
    assert (shown["agent_type"], shown["state"]) == ("billing", "queued")
    for args in (
        ["dead", "list", "billing"],
        ["failed", "list", "billing"],
        ["workers", "billing"],
    ):
        done = agentjobs(*args)
        assert done.code == 0, (args, done.err)
    unknown = agentjobs("info", "billin")
    assert unknown.code == 2
    assert unknown.err == (
        "error: agent_type: unknown agent type 'billin': not configured and never seen in "
        "Redis (jobs:types); known: billing, dining, dmc, experiences, flights, transportation\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["info"], ["workers"], ["job", "show", "dining", "x"], ["dead", "list", "dining"],
        ["pause", "dining"], ["resume", "dining"],
    ],
)  # fmt: skip
def test_an_unreachable_redis_is_one_line_and_exit_1(args: list[str]) -> None:
    done = run_child(*args, "--redis-url", DEAD_REDIS)
    assert done.returncode == 1
    assert one_error_line(done).startswith("error: backend unavailable: ")


def test_the_environment_names_the_redis_and_the_agent_types(redis_url: str) -> None:
    env = child_env({"QUEUE_REDIS_URL": redis_url, "QUEUE_AGENT_TYPES": "lodging"})
    done = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs", "info", "-o", "json"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [t["agent_type"] for t in json.loads(done.stdout)["types"]] == ["lodging"]


# -- info -------------------------------------------------------------------------------
@pytest.mark.valkey  # one operator command on the second server family
def test_info_counts_each_type_in_json_and_as_a_table(agentjobs: Any, redis_url: str) -> None:
    dead_letters(redis_url, ["a", "b"])
    enqueue(redis_url, 3)
    document = agentjobs("info", "dining", "experiences", "-o", "json").json()
    dining, experiences = document["types"]
    assert dining["agent_type"] == "dining"
    assert (dining["queued"], dining["running"], dining["delayed"], dining["dead"]) == (3, 0, 0, 2)
    assert dining["totals"] == {"enqueued": 5, "completed": 0, "failed": 2}
    assert dining["oldest_waiting_seconds"] is not None and dining["oldest_waiting_seconds"] >= 0
    # The worker recorded the minute's history when it started, after the first two
    # jobs were enqueued: the last minute counts the three since (tests/cli/
    # test_info_history.py shows the totals' fallback and the windows).
    assert dining["last_minute"]["source"] == "history"
    assert dining["last_minute"]["enqueued"] == 3
    assert experiences["queued"] == 0 and experiences["oldest_waiting_seconds"] is None
    assert experiences["last_minute"] is None  # no worker of it: no history

    table = agentjobs("info")
    assert table.code == 0, table.err
    assert table_row(table.out, "TYPE")[7:10] == ["ENQUEUED (1m)", "COMPLETED (1m)", "FAILED (1m)"]
    cells = table_row(table.out, "dining")
    assert cells[1:6] == ["3", "0", "0", "2", "0"] and cells[7:9] == ["3", "0"]
    assert table_row(table.out, "dmc")[6] == "—"  # nothing waits: no age


@pytest.mark.single_node("one child process watching; the counting is the same on a cluster")
# -- pause, resume ----------------------------------------------------------------------
def test_pause_and_resume_say_what_they_did_and_info_shows_it(
    agentjobs: Any, client: SyncClient
) -> None:
    paused = agentjobs("pause", "dining")
    assert paused.code == 0, paused.err
    assert re.fullmatch(
        r"dining: paused at \S+Z?\+00:00; workers start none of its jobs until it is "
        r"resumed \(running jobs finish\)\n",
        paused.out,
    ), paused.out
    assert client.exists(DINING.paused) == 1
    again = agentjobs("pause", "dining", "-o", "json").json()
    assert (again["agent_type"], again["paused"], again["changed"]) == ("dining", True, False)
    assert again["since"] == int(sync_reply(client.get(DINING.paused))) / 1000
    assert agentjobs("pause", "dining").out.startswith("dining: already paused, since ")
    table = agentjobs("info", "dining")
    assert table_row(table.out, "TYPE")[-1] == "PAUSED"
    assert re.fullmatch(r"for \d+\.\ds", table_row(table.out, "dining")[-1])
    info = agentjobs("info", "dining", "-o", "json").json()["types"][0]
    assert (info["paused"], info["paused_since"]) == (True, again["since"])
    resumed = agentjobs("resume", "dining")
    assert resumed.code == 0 and resumed.out.startswith("dining: resumed (paused since ")
    assert client.exists(DINING.paused) == 0
    assert agentjobs("resume", "dining").out == "dining: not paused; nothing to resume\n"
    assert table_row(agentjobs("info", "dining").out, "dining")[-1] == "—"


# -- job cancel, session cancel ------------------------------------------------------------
def test_job_cancel_says_what_it_did_and_job_show_prints_the_reason(
    agentjobs: Any, redis_url: str
) -> None:
    [job_id] = enqueue(redis_url, 1, session_id="cli-session")
    done = agentjobs("job", "cancel", "dining", job_id, "--reason", "customer left")
    assert done.code == 0, done.err
    assert done.out == f"dining / {job_id}: cancelled (it was waiting: it never starts)\n"
    again = agentjobs("job", "cancel", "dining", job_id, "-o", "json").json()
    assert again == [{"agent_type": "dining", "job_id": job_id, "outcome": "finished",
                      "state": "cancelled"}]  # fmt: skip
    shown = agentjobs("job", "show", "dining", job_id)
    assert re.search(r"^state +cancelled *$", shown.out, re.M), shown.out
    assert re.search(r"^cancelled +customer left *$", shown.out, re.M), shown.out
    assert agentjobs("job", "show", "dining", job_id, "-o", "json").json()["state"] == "cancelled"
    unknown = agentjobs("job", "cancel", "dining", "no-such-job")
    assert (
        unknown.out == "dining / no-such-job: unknown (never enqueued, or its result has expired)\n"
    )
    bad = agentjobs("job", "cancel", "dining", "a b")
    assert bad.code == 2 and bad.err.startswith("error: job_id: ")
    long_reason = agentjobs("job", "cancel", "dining", job_id, "--reason", "r" * 1001)
    assert long_reason.code == 2 and long_reason.err.startswith("error: reason: longer than 1000")


def test_session_cancel_cancels_each_job_of_the_session(agentjobs: Any, redis_url: str) -> None:
    ids = enqueue(redis_url, 2, session_id="cli-session-2")
    enqueue(redis_url, 1, session_id="someone-else")
    done = agentjobs("session", "cancel", "cli-session-2", "-o", "json")
    assert done.code == 0, done.err
    assert sorted(r["job_id"] for r in done.json()) == sorted(ids)
    assert {r["outcome"] for r in done.json()} == {"cancelled"}
    assert agentjobs("session", "cancel", "cli-session-2").out == (
        "no job of that session was found\n"
    )


def test_pause_of_a_corrupt_pause_key_is_one_line_and_exit_1(
    agentjobs: Any, client: SyncClient
) -> None:
    client.rpush(DINING.paused, "x")
    done = agentjobs("pause", "dining")
    assert done.code == 1
    assert done.err == (
        f"error: Redis: CorruptQueueState: corrupt queue state at {DINING.paused}: holds a "
        "list, where the queue keeps a string\n"
    )


# -- limits ------------------------------------------------------------------------------
def test_limits_set_and_show_as_a_table_and_in_json(agentjobs: Any, client: SyncClient) -> None:
    assert agentjobs("limits", "show", "dining").out == (
        "dining: no limits (plain FIFO)\n  fair_by              none\n  rate                 none\n"
        "  burst                none\n  max_running          none\n"
        "  max_running_per_key  none\n"
    )
    done = agentjobs(
        "limits", "set", "dining", "--fair-by", "tenant", "--rate", "50/s",
        "--max-running", "8", "--max-running-per-key", "2",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert "  burst                none (the rate's count, 50)\n" in done.out
    assert sync_reply(client.hgetall(DINING.limits)) == {
        "fair_by": "tenant", "rate": "50", "interval_ms": "1000", "max_running": "8",
        "max_running_per_key": "2",
    }  # fmt: skip
    lifted = agentjobs("limits", "set", "dining", "--rate", "none", "--burst", "5", "-o", "json")
    assert lifted.json() == {
        "agent_type": "dining", "fair_by": "tenant", "rate": None, "burst": 5,
        "max_running": 8, "max_running_per_key": 2, "key_weights": {},
    }  # fmt: skip
    shown = agentjobs("limits", "show", "dining", "-o", "json").json()
    assert shown.pop("fair_share") == {"keys_waiting": 0, "longest": [], "sampled": False}
    assert shown == lifted.json()


def test_key_weights_are_set_shown_and_lifted(agentjobs: Any, client: SyncClient) -> None:
    done = agentjobs("limits", "set", "dining", "--key-weight", "acme=4", "--key-weight", "b=2")
    assert done.code == 0, done.err
    assert "  key_weights          acme=4, b=2\n" in done.out
    assert sync_reply(client.hget(DINING.limits, "weight:acme")) == "4"
    shown = agentjobs("limits", "show", "dining", "-o", "json").json()
    assert shown["key_weights"] == {"acme": 4, "b": 2}
    lifted = agentjobs("limits", "set", "dining", "--key-weight", "acme=none", "-o", "json")
    assert lifted.json()["key_weights"] == {"b": 2}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--key-weight", "acme"], "key_weights: 'acme' is not KEY=W"),
        (["--key-weight", "acme=0"], "key_weights: the weight of 'acme' must be a whole number "
         "from 1 to 1000 (or None), got 0"),
        (["--key-weight", "acme=2", "--rate", "fast"], "rate: 'fast' is not a rate such as "
         "'100/s', '5/m', '1000/h' or '3/10s'"),
    ],
)  # fmt: skip
def test_a_bad_key_weight_is_one_line_and_nothing_is_written(
    agentjobs: Any, client: SyncClient, args: list[str], error: str
) -> None:
    done = agentjobs("limits", "set", "dining", *args)
    assert (done.code, done.out, done.err) == (2, "", f"error: {error}\n")
    assert not client.exists(DINING.limits)


def test_limits_show_names_the_keys_waiting_longest(agentjobs: Any, client: SyncClient) -> None:
    """Fair share's waits, read from the ring's since hash (keys.py): on-call sees which
    tenant starves, without a per-tenant metric."""
    client.hset(DINING.limits, "fair_by", "tenant")
    seconds, _ = sync_reply(client.time())
    now_ms = int(seconds) * 1000
    client.hset(
        DINING.fair_since,
        mapping={"tenant-a": now_ms - 600_000, "tenant-b": now_ms - 2_000, "c": now_ms},
    )
    table = agentjobs("limits", "show", "dining").out
    assert "fair share: 3 key(s) with jobs waiting\n" in table
    rows = table.split("waiting longest without a start:\n")[1].splitlines()
    assert [row.split()[-1] for row in rows] == ["tenant-a", "tenant-b", "c"]
    assert 600 <= float(rows[0].split()[0]) < 700
    waits = agentjobs("limits", "show", "dining", "-o", "json").json()["fair_share"]
    assert waits["keys_waiting"] == 3 and waits["longest"][0]["key"] == "tenant-a"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--rate", "fast"], "rate: 'fast' is not a rate such as '100/s', '5/m', '1000/h' or "
         "'3/10s'"),
        (["--burst", "0"], "burst: must be a whole number from 1 to 1000000000 (or none), got 0"),
        (["--max-running", "-3"], "max_running: must be a whole number from 1 to 1000000000 "
         "(or none), got '-3'"),
        (["--fair-by", "colour"], "fair_by: 'colour' is none of tenant, orchestrator_id, "
         "session_id or none"),
    ],
)  # fmt: skip
def test_a_bad_limit_is_one_line_naming_it_and_exit_2(
    agentjobs: Any, client: SyncClient, args: list[str], error: str
) -> None:
    done = agentjobs("limits", "set", "dining", "--max-running", "4", *args)
    assert (done.code, done.out, done.err) == (2, "", f"error: {error}\n")
    assert not client.exists(DINING.limits)  # the good value beside it is not written


def test_limits_set_without_a_limit_is_one_line_and_exit_2(agentjobs: Any) -> None:
    done = agentjobs("limits", "set", "dining")
    assert (done.code, done.err) == (
        2,
        "error: limits: nothing to change: name at least one limit\n",
    )


def test_info_watch_reports_what_happened_since_its_first_reading(redis_url: str) -> None:
    watch = subprocess.Popen(
        [sys.executable, "-m", "platform_common.jobs", "info", "dining", "--watch",
         "--interval", "0.1", "-o", "json", "--redis-url", redis_url],
        cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())["types"][0]
        assert first["last_minute"] == {
            "enqueued": 0, "completed": 0, "failed": 0, "seconds": 0.0, "source": "watch",
        }  # fmt: skip
        enqueue(redis_url, 4)
        while True:  # one line per refresh; the test's timeout bounds the wait
            latest = json.loads(watch.stdout.readline())["types"][0]
            if latest["last_minute"]["enqueued"]:
                break
    finally:
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=30)
    assert latest["last_minute"]["enqueued"] == 4 and latest["last_minute"]["seconds"] > 0
    assert latest["totals"]["enqueued"] == 4 and latest["queued"] == 4
    assert watch.returncode == 0, err  # Ctrl-C ends a watch: not an error


def test_info_watch_draws_a_table_per_refresh_and_stops_after_count(agentjobs: Any) -> None:
    done = agentjobs("info", "dining", "--watch", "--count", "2", "--interval", "0.1")
    assert done.code == 0, done.err
    assert "ENQUEUED (1m)" in done.out
    assert table_row(done.out, "dining")[1] == "0"


# -- workers ----------------------------------------------------------------------------
@pytest.mark.single_node("a worker process; where workers register is the same on a cluster")
def test_workers_shows_heartbeats_and_the_jobs_each_runs(agentjobs: Any, redis_url: str) -> None:
    env = {**FAST_SETTINGS, "QUEUE_MAX_ATTEMPTS": "1"}
    with WorkerGroup(redis_url, "dining", "tests.support.queue_handlers:behave", env=env) as group:
        worker = group.start(concurrency=3)
        ids = enqueue(redis_url, 2, constraints=behaviour("sleep", seconds=120))

        def both_running() -> dict[str, Any] | None:
            report = agentjobs("workers", "dining", "-o", "json").json()
            held = [w for w in report["workers"] if len(w["jobs_in_progress"]) == 2]
            return report if held else None

        report = wait_until(both_running)
        table = agentjobs("workers")
        worker.kill()
    (status,) = report["workers"]
    assert status["worker_id"] == worker.worker_id and status["agent_type"] == "dining"
    assert status["active"] is True and status["heartbeat_age_seconds"] >= 0
    assert sorted(status["jobs_in_progress"]) == sorted(ids)
    assert status["host"] == ""  # an id given with --worker-id names no host
    assert status["pid"] is None and status["concurrency"] == 3
    assert report["unclaimed"] == {"dining": 0}
    cells = table_row(table.out, "dining")
    assert cells[1] == worker.worker_id and cells[4:7] == ["yes", "2", "3"]


def test_a_heartbeat_dated_in_the_future_is_no_active_worker(
    agentjobs: Any, client: SyncClient
) -> None:
    """A beat far ahead of Redis' clock (its clock stepped back, or a hand edit) proves
    nothing of its worker: neither `info` nor `workers` counts it, as the exporter doesn't."""
    now_ms = int(float(client.time()[0]) * 1000)  # type: ignore[index]
    client.zadd(DINING.workers, {"ahead": now_ms + 3_600_000, "now": now_ms})
    info = agentjobs("info", "dining", "-o", "json").json()
    assert info["types"][0]["active_workers"] == 1
    workers = {
        w["worker_id"]: w for w in agentjobs("workers", "dining", "-o", "json").json()["workers"]
    }
    assert (workers["ahead"]["active"], workers["now"]["active"]) == (False, True)


def test_workers_reads_the_host_from_a_default_worker_id(agentjobs: Any, redis_url: str) -> None:
    async def beat_and_read() -> None:
        settings = fast_settings(redis_url)
        async with running_worker(settings, cannot_book) as worker:
            done = await asyncio.to_thread(agentjobs, "workers", "dining", "-o", "json")
            (status,) = done.json()["workers"]
            assert status["worker_id"] == worker.worker_id
            assert status["host"] == worker.worker_id.split(":")[0] != ""
            assert status["jobs_in_progress"] == []

    asyncio.run(beat_and_read())


# -- job show ---------------------------------------------------------------------------
def test_job_show_gives_state_attempts_tracebacks_payload_and_result(
    agentjobs: Any, redis_url: str
) -> None:
    (job_id,) = dead_letters(redis_url, ["omakase for 2"])
    detail = agentjobs("job", "show", "dining", job_id, "-o", "json").json()
    assert (detail["state"], detail["attempts"], detail["max_attempts"]) == ("dead", 1, 1)
    assert detail["last_error"] == "RuntimeError: cannot book omakase for 2"
    (attempt,) = detail["history"]
    assert attempt["outcome"] == "error" and attempt["error"] == detail["last_error"]
    assert "Traceback (most recent call last)" in attempt["traceback"]
    assert "in cannot_book" in attempt["traceback"]
    assert detail["payload"]["task"] == "omakase for 2"
    assert detail["result"]["status"] == "failed"

    table = agentjobs("job", "show", "dining", job_id)
    assert table.code == 0, table.err
    for shown in ("state       dead", "attempt 1", "in cannot_book", "omakase for 2", "payload"):
        assert shown in table.out


def test_job_show_of_a_waiting_job_and_of_no_job(agentjobs: Any, redis_url: str) -> None:
    (job_id,) = enqueue(redis_url, 1)
    detail = agentjobs("job", "show", "dining", job_id, "-o", "json").json()
    assert (detail["state"], detail["attempts"], detail["history"]) == ("queued", 0, [])
    assert detail["result"] is None and detail["payload"]["job_id"] == job_id
    missing = agentjobs("job", "show", "dining", "no-such-job")
    assert (missing.code, missing.err) == (1, "error: job 'no-such-job' does not exist\n")


def retried_job(redis_url: str, *, max_attempts: int, backoff_base: float) -> str:
    """A job whose first attempt fails and is retried: still delayed for its retry when
    the backoff is long, dead (with the retry's due_at in its record) when it is short."""

    async def make() -> str:
        settings = fast_settings(redis_url, max_attempts=max_attempts, backoff_base=backoff_base)
        async with await JobQueue.connect(settings) as queue:
            (job_id,) = await queue.enqueue_many([make_job(task="a table for 4")])

            async def settled() -> bool:
                stats = await queue.stats("dining")
                return stats.delayed == 1 if max_attempts > 2 else stats.dead == 1

            async with running_worker(settings, cannot_book):
                await eventually(settled)
        return job_id

    return asyncio.run(make())


def test_job_show_of_a_dead_job_says_how_long_redis_keeps_it_and_no_retry(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    job_id = retried_job(redis_url, max_attempts=2, backoff_base=0.05)
    detail = agentjobs("job", "show", "dining", job_id, "-o", "json").json()
    assert detail["state"] == "dead" and detail["due_at"] is not None  # the record keeps it
    dropped_at = int(sync_reply(client.pexpiretime(DINING.job(job_id))))
    assert detail["kept_until"] == dropped_at / 1000
    # The dead-letter retention (14 days), not the job's 60 s TTL.
    assert detail["kept_until"] >= detail["finished_at"] + 14 * 86400
    assert detail["expires_at"] < detail["finished_at"] + 3600

    table = agentjobs("job", "show", "dining", job_id)
    assert table.code == 0, table.err
    kept = timestamp(detail["kept_until"])
    assert f"kept until  {kept} (the dead-letter retention)" in table.out
    assert "expires" not in table.out and "retry due" not in table.out
    assert "retry scheduled for" in table.out  # the first attempt's, as history


def test_job_show_of_a_job_delayed_for_a_retry_says_when_it_is_due_and_expires(
    agentjobs: Any, redis_url: str
) -> None:
    job_id = retried_job(redis_url, max_attempts=3, backoff_base=300.0)
    detail = agentjobs("job", "show", "dining", job_id, "-o", "json").json()
    assert (detail["state"], detail["kept_until"]) == ("retrying", None)
    table = agentjobs("job", "show", "dining", job_id)
    assert f"retry due   {timestamp(detail['due_at'])}" in table.out
    assert f"expires     {timestamp(detail['expires_at'])}" in table.out
    assert "kept until" not in table.out


def test_job_show_prints_the_last_progress_and_when(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    async def report() -> tuple[str, int]:
        async with await JobQueue.connect(fast_settings(redis_url)) as queue:
            return await reporting_job(queue, {"pages": 3, "of": 7, "note": "ünï 🚀"})

    job_id, at = asyncio.run(report())
    detail = agentjobs("job", "show", "dining", job_id, "-o", "json").json()
    assert detail["progress"] == {"pages": 3, "of": 7, "note": "ünï 🚀"}
    assert detail["progress_at"] == at / 1000
    shown = agentjobs("job", "show", "dining", job_id)
    assert shown.code == 0, shown.err
    assert f"progress (reported {timestamp(at / 1000)})" in shown.out
    assert '"pages": 3' in shown.out and "ünï 🚀" in shown.out
    # A report that does not parse is shown as stored, where the report would be.
    sync_reply(client.hset(DINING.job(job_id), "progress", "{not json"))
    damaged = agentjobs("job", "show", "dining", job_id)
    assert damaged.code == 0, damaged.err
    assert "progress (stored, does not parse)" in damaged.out and "{not json" in damaged.out


def test_job_show_of_a_scheduled_job_says_when_it_runs(agentjobs: Any, redis_url: str) -> None:
    async def schedule() -> str:
        async with await JobQueue.connect(fast_settings(redis_url)) as queue:
            return await queue.enqueue(make_job(), run_at=RUN_AT)

    job_id = asyncio.run(schedule())
    detail = agentjobs("job", "show", "dining", job_id, "-o", "json").json()
    assert (detail["state"], detail["run_at"]) == ("queued", RUN_AT.timestamp())
    shown = agentjobs("job", "show", "dining", job_id)
    assert "scheduled for  " + RUN_AT.isoformat(timespec="milliseconds") in shown.out
    info = agentjobs("info", "dining", "-o", "json").json()["types"][0]
    assert (info["queued"], info["delayed"]) == (0, 1)


def test_job_show_and_info_show_the_priority(agentjobs: Any, redis_url: str) -> None:
    async def enqueue_levels() -> list[str]:
        async with await JobQueue.connect(fast_settings(redis_url)) as queue:
            return await queue.enqueue_many(
                [make_job() for _ in range(4)], priority=["high", "low", "low", None]
            )

    high, low, _, normal = asyncio.run(enqueue_levels())
    assert agentjobs("job", "show", "dining", high, "-o", "json").json()["priority"] == "high"
    assert agentjobs("job", "show", "dining", normal, "-o", "json").json()["priority"] == "normal"
    assert re.search(r"^priority +low *$", agentjobs("job", "show", "dining", low).out, re.M)
    info = agentjobs("info", "dining", "-o", "json").json()["types"][0]
    assert info["queued_by_priority"] == {"high": 1, "normal": 1, "low": 2}
    table = agentjobs("info", "dining")
    assert table_row(table.out, "dining")[1] == "4 (high 1, low 2)"


# -- dead list / show -------------------------------------------------------------------
def test_dead_list_newest_first_with_limit_and_error_match(agentjobs: Any, redis_url: str) -> None:
    ids = dead_letters(redis_url, ["timeout 1", "refused 2", "timeout 3"])
    listed = agentjobs("dead", "list", "dining", "-o", "json").json()
    assert listed["total"] == 3 and listed["complete"] is True
    assert {x["job_id"] for x in listed["letters"]} == set(ids)
    dead_at = [x["dead_at"] for x in listed["letters"]]
    assert dead_at == sorted(dead_at, reverse=True)

    matching = agentjobs(
        "dead", "list", "dining", "--error-matches", "cannot book time", "-o", "json"
    ).json()
    assert sorted(x["last_error"] for x in matching["letters"]) == [
        "RuntimeError: cannot book timeout 1",
        "RuntimeError: cannot book timeout 3",
    ]
    one = agentjobs("dead", "list", "dining", "--limit", "1", "-o", "json").json()
    assert len(one["letters"]) == 1 and one["total"] == 3

    table = agentjobs("dead", "list", "dining", "--error-matches", "refused")
    assert table.code == 0, table.err
    (refused,) = [i for i, x in zip(ids, ["t", "r", "t"], strict=True) if x == "r"]
    cells = table_row(table.out, refused)
    assert cells[2:] == ["1", "RuntimeError: cannot book refused 2"]
    assert "1 matching 'refused' among all of 3 dead letters" in table.out


def test_dead_list_refuses_a_bad_expression(agentjobs: Any) -> None:
    done = agentjobs("dead", "list", "dining", "--error-matches", "(unclosed")
    assert done.code == 2
    assert done.err.startswith("error: --error-matches: not a regular expression: ")


def test_dead_show_shows_a_dead_letter_and_refuses_other_jobs(
    agentjobs: Any, redis_url: str
) -> None:
    (dead,) = dead_letters(redis_url, ["broken"])
    (waiting,) = enqueue(redis_url, 1)
    detail = agentjobs("dead", "show", "dining", dead, "-o", "json").json()
    assert detail["job_id"] == dead and detail["state"] == "dead"
    refused = agentjobs("dead", "show", "dining", waiting)
    assert refused.code == 1
    assert refused.err == (
        f"error: job '{waiting}' is not a dead letter of 'dining' (its state: queued); "
        "`job show` shows it\n"
    )


# -- dead requeue -----------------------------------------------------------------------
def test_requeue_by_error_dry_run_then_real(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    ids = dead_letters(redis_url, ["timeout a", "refused b", "timeout c"])
    timeouts = {ids[0], ids[2]}
    args = ("dead", "requeue", "dining", "--error-matches", "timeout")

    dry = agentjobs(*args, "--dry-run", "-o", "json").json()
    assert (dry["dry_run"], dry["selected"], dry["done"]) == (True, 2, 0)
    assert set(dry["sample"]) == timeouts
    assert client.llen(DINING.dead) == 3 and client.llen(DINING.queue) == 0  # unchanged

    text = agentjobs(*args, "--dry-run")
    assert text.out.startswith(
        "dry run (nothing changed): would requeue 2 dead letter(s) of 'dining' "
        "(--error-matches 'timeout'): "
    )

    done = agentjobs(*args, "-o", "json").json()
    assert (done["dry_run"], done["selected"], done["done"]) == (False, 2, 2)
    assert client.lrange(DINING.dead, 0, -1) == [ids[1]]
    assert set(sync_reply(client.lrange(DINING.queue, 0, -1))) == timeouts
    for job_id in timeouts:
        assert client.hget(DINING.job(job_id), "state") is None  # queued: no state
    again = agentjobs(*args)  # nothing matches any more
    assert (
        again.out
        == "requeued 0 of 0 selected dead letter(s) of 'dining' (--error-matches 'timeout')\n"
    )


def test_requeue_by_id_counts_only_what_it_did(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    dead, _ = dead_letters(redis_url, ["one", "two"])
    (waiting,) = enqueue(redis_url, 1)
    done = agentjobs("dead", "requeue", "dining", "--id", dead, "--id", waiting, "--id", "ghost")
    assert done.code == 0, done.err
    assert done.out == (
        f"requeued 1 of 1 selected dead letter(s) of 'dining' (--id)\n"
        f"not dead letters, left alone: {waiting}, ghost\n"
    )
    assert client.llen(DINING.dead) == 1
    assert client.hget(DINING.job(waiting), "state") is None  # untouched: still plain queued


@pytest.mark.parametrize(
    "selection",
    [[], ["--all", "--id", "x"], ["--all", "--error-matches", "x"]],
    ids=["none", "all-and-id", "all-and-match"],
)
def test_requeue_needs_exactly_one_selection(agentjobs: Any, selection: list[str]) -> None:
    done = agentjobs("dead", "requeue", "dining", *selection)
    assert done.code == 2
    assert done.err == "error: selection: give exactly one of --id, --all, --error-matches\n"


# -- dead purge -------------------------------------------------------------------------
def test_purge_all_in_batches_dry_run_then_real(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    ids = dead_letters(redis_url, [f"broken {n}" for n in range(1_200)])  # 3 batches of 500
    args = ("dead", "purge", "dining", "--all", "-o", "json")
    dry = agentjobs(*args, "--dry-run").json()
    assert (dry["selected"], dry["done"], dry["kind"]) == (1_200, 0, "all")
    assert dry["sample"] == [ids[0], *ids[1:10]]  # the oldest first, as they would go
    assert client.llen(DINING.dead) == 1_200

    done = agentjobs(*args, "--yes").json()
    assert (done["selected"], done["done"]) == (1_200, 1_200)
    assert client.llen(DINING.dead) == 0
    assert not client.exists(DINING.job(ids[0]), DINING.job(ids[-1]), DINING.result(ids[600]))


def test_purge_by_error_leaves_the_others(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    ids = dead_letters(redis_url, ["poison x", "fine y"])
    done = agentjobs("dead", "purge", "dining", "--error-matches", "poison", "--yes")
    assert (
        done.out == "purged 1 of 1 selected dead letter(s) of 'dining' (--error-matches 'poison')\n"
    )
    assert client.lrange(DINING.dead, 0, -1) == [ids[1]]
    assert not client.exists(DINING.job(ids[0])) and client.exists(DINING.job(ids[1]))


@pytest.mark.single_node("the refusal happens before Redis is read")
def test_purge_without_a_terminal_refuses_unless_yes(redis_url: str, client: SyncClient) -> None:
    dead_letters(redis_url, ["kept"])
    done = run_child(
        "dead", "purge", "dining", "--all", "--redis-url", redis_url, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2
    assert one_error_line(done) == (
        "error: purge: no terminal to confirm on; pass --yes (or --dry-run)"
    )
    assert client.llen(DINING.dead) == 1


def purge_on_a_terminal(
    redis_url: str,
    answer: str,
    *selection: str,
    before_answering: Callable[[], object] | None = None,
) -> tuple[int, str]:
    """Run `dead purge` (`--all` unless `selection` says) with a pseudo-terminal as
    stdin and stderr; answer its question with `answer`, after `before_answering` has
    run if given. Returns the exit status and what the terminal showed."""
    leader, follower = pty.openpty()
    # TERM: rich draws no progress bar on a "dumb" terminal, which a CI runner may set.
    process = subprocess.Popen(
        [sys.executable, "-m", "platform_common.jobs", "dead", "purge", "dining",
         *(selection or ("--all",)), "--redis-url", redis_url],
        cwd=REPO_ROOT, env=child_env({"TERM": "xterm"}), stdin=follower,
        stdout=subprocess.PIPE, stderr=follower, text=True,
    )  # fmt: skip
    os.close(follower)
    shown = b""
    while b"(record and result)?" not in shown:  # the question waits for the answer
        shown += os.read(leader, 1024)
    if before_answering is not None:
        before_answering()
    os.write(leader, answer.encode() + b"\n")
    out, _ = process.communicate(timeout=60)
    shown += _drain(leader)  # the rest: the progress bar the terminal saw, if any
    os.close(leader)
    return process.returncode, shown.decode() + out


def _drain(leader: int) -> bytes:
    """What a pseudo-terminal still holds once its process has exited."""
    held = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the process is gone and everything has been read
            return held
        if not chunk:
            return held
        held += chunk


@pytest.mark.single_node("a pseudo-terminal; the purge itself is tested on both")
def test_purge_asks_on_a_terminal_stops_on_no_and_draws_its_progress(
    redis_url: str, client: SyncClient
) -> None:
    dead_letters(redis_url, ["a", "b"])
    code, shown = purge_on_a_terminal(redis_url, "n")
    assert "Purge 2 dead letter(s) of 'dining' for good (record and result)?" in shown
    assert code == 1 and client.llen(DINING.dead) == 2
    code, shown = purge_on_a_terminal(redis_url, "y")
    assert code == 0 and "purged 2 of 2 selected" in shown
    assert client.llen(DINING.dead) == 0
    # The progress bar, drawn on the terminal's stderr: its last frame says all 2 done.
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)  # without the colour codes
    assert re.search(r"purge \S+ 2/2 ", drawn), drawn


@pytest.mark.single_node("a pseudo-terminal; the moment is tested on both in tests/operations")
@pytest.mark.parametrize("selection", [(), ("--error-matches", "TimeoutError")], ids=["all", "re"])
def test_a_purge_confirmed_on_a_terminal_leaves_letters_dead_lettered_after_the_question(
    redis_url: str, client: SyncClient, selection: tuple[str, ...]
) -> None:
    async def connected(act: Callable[[JobQueue], Awaitable[list[str]]]) -> list[str]:
        async with await JobQueue.connect(fast_settings(redis_url, max_attempts=1)) as queue:
            return await act(queue)

    errors = [f"TimeoutError {n}" for n in range(5)]
    shown = asyncio.run(connected(lambda queue: make_dead_letters(queue, errors)))
    new: list[str] = []

    def meanwhile_at_the_question() -> None:
        # Two of the five asked about are requeued (and fail again), three new jobs fail.
        newer = [f"TimeoutError new {n}" for n in range(3)]
        new.extend(asyncio.run(connected(lambda queue: meanwhile(queue, shown[:2], newer))))

    code, out = purge_on_a_terminal(
        redis_url, "y", *selection, before_answering=meanwhile_at_the_question
    )
    assert "Purge 5 dead letter(s) of 'dining' for good (record and result)?" in out
    assert code == 0, out
    assert set(sync_reply(client.lrange(DINING.dead, 0, -1))) == {*shown[:2], *new}
    assert not client.exists(*(DINING.job(j) for j in shown[2:]))
    how = "--all" if not selection else "--error-matches 'TimeoutError'"
    newer = 5 if not selection else 2  # --error-matches holds the ids it matched
    assert (
        f"purged 3 of 5 selected dead letter(s) of 'dining' ({how}); 2 were no longer dead "
        f"letters; {newer} dead-lettered after "
    ) in out
    assert " were left alone" in out


def test_job_panels_written_to_a_pipe_are_as_wide_as_what_they_hold(redis_url: str) -> None:
    # Piped, the console is 200 columns wide (no id cut): a panel filling them was a
    # screen of padding per line.
    (job_id,) = enqueue(redis_url, 1)
    env = child_env({})
    env.pop("COLUMNS", None)
    shown = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs", "job", "show", "dining", job_id,
         "--redis-url", redis_url],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    [top] = [line for line in lines if line.startswith("╭") and " payload " in line]
    payload = json.loads(run_child("job", "show", "dining", job_id, "-o", "json",
                                   "--redis-url", redis_url).stdout)["payload"]  # fmt: skip
    widest = max(len(line) for line in json.dumps(payload, indent=2).splitlines())
    assert len(top) == widest + 4  # the borders and one space of padding each side
    assert job_id in shown.stdout


def test_a_table_written_to_a_pipe_cuts_no_job_id(redis_url: str) -> None:
    # No terminal to fit (a runbook step, a script): rich's default of 80 columns
    # squeezed the ids and the error text to "308a9f9a-e001-4077-84…".
    ids = dead_letters(redis_url, ["a long enough error text to need the columns"])
    env = child_env({})
    env.pop("COLUMNS", None)
    listed = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs", "dead", "list", "dining",
         "--redis-url", redis_url],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert ids[0] in listed.stdout
    assert "RuntimeError: cannot book a long enough error text to need the columns" in listed.stdout


# -- failed ... -------------------------------------------------------------------------
def test_failed_has_the_commands_options_and_exits_of_dead() -> None:
    group = typer.main.get_command(root.app)
    assert isinstance(group, TyperGroup)
    dead, failed = group.commands["dead"], group.commands["failed"]
    assert isinstance(dead, TyperGroup) and isinstance(failed, TyperGroup)
    assert sorted(failed.commands) == sorted(dead.commands) == ["list", "purge", "requeue", "show"]
    for name, command in dead.commands.items():
        options = [(p.name, p.opts, p.required, p.default) for p in command.params]
        assert [
            (p.name, p.opts, p.required, p.default) for p in failed.commands[name].params
        ] == options, name


def test_failed_jobs_are_listed_and_shown_and_dead_show_refuses_them(
    agentjobs: Any, redis_url: str
) -> None:
    ids = failed_jobs(redis_url, ["card declined", "venue closed", "card expired"])
    listed = agentjobs("failed", "list", "dining", "-o", "json").json()
    assert [x["job_id"] for x in listed["letters"]] == ids[::-1]  # newest first
    assert (listed["total"], listed["kept"]) == (3, "failed")
    assert listed["letters"][0]["last_error"] == "NonRetryableError: card expired"
    table = agentjobs("failed", "list", "dining", "--error-matches", "card")
    assert table.code == 0, table.err
    assert "2 matching 'card' among all of 3 failed jobs, newest first." in table.out
    assert "FAILED AT" in table.out and ids[1] not in table.out
    assert agentjobs("dead", "list", "dining", "-o", "json").json()["total"] == 0

    refused = agentjobs("dead", "show", "dining", ids[0])
    assert (refused.code, refused.err) == (
        1,
        f"error: job '{ids[0]}' is not a dead letter of 'dining' (its state: failed); "
        "`job show` shows it\n",
    )
    detail = agentjobs("failed", "show", "dining", ids[0], "-o", "json").json()
    assert (detail["state"], detail["attempts"]) == ("failed", 1)
    assert [a["outcome"] for a in detail["history"]] == ["fatal"]
    (waiting,) = enqueue(redis_url, 1)
    not_failed = agentjobs("failed", "show", "dining", waiting)
    assert not_failed.code == 1
    assert "is not a failed job of 'dining' (its state: queued)" in not_failed.err


def test_failed_requeue_and_purge_act_on_the_failed_list_only(
    agentjobs: Any, redis_url: str, client: SyncClient
) -> None:
    failed = failed_jobs(redis_url, ["card declined", "venue closed", "card expired"])
    (dead,) = dead_letters(redis_url, ["card declined too"])
    dry = agentjobs("failed", "requeue", "dining", "--error-matches", "card", "--dry-run")
    assert dry.out.startswith(
        "dry run (nothing changed): would requeue 2 failed job(s) of 'dining' "
        "(--error-matches 'card'): "
    )
    requeued = agentjobs("failed", "requeue", "dining", "--id", failed[0], "--id", dead)
    assert requeued.out == (
        "requeued 1 of 1 selected failed job(s) of 'dining' (--id)\n"
        f"not failed jobs, left alone: {dead}\n"
    )
    assert sync_reply(client.lrange(DINING.queue, 0, -1)) == [failed[0]]
    assert client.hget(DINING.job(failed[0]), "state") is None  # queued: no state
    assert sync_reply(client.lrange(DINING.failed, 0, -1)) == [failed[2], failed[1]]
    assert sync_reply(client.lrange(DINING.dead, 0, -1)) == [dead]  # another list: untouched

    purged = agentjobs("failed", "purge", "dining", "--all", "--yes")
    assert purged.out == "purged 2 of 2 selected failed job(s) of 'dining' (--all)\n"
    assert client.llen(DINING.failed) == 0
    assert not client.exists(DINING.job(failed[1]), DINING.job(failed[2]))
    assert client.llen(DINING.dead) == 1


@pytest.mark.single_node("the refusal happens before Redis is read")
def test_failed_purge_without_a_terminal_refuses_unless_yes(
    redis_url: str, client: SyncClient
) -> None:
    failed_jobs(redis_url, ["kept"])
    done = run_child(
        "failed", "purge", "dining", "--all", "--redis-url", redis_url, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2
    assert one_error_line(done) == (
        "error: purge: no terminal to confirm on; pass --yes (or --dry-run)"
    )
    assert client.llen(DINING.failed) == 1
