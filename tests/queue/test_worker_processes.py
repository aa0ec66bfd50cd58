"""Worker processes under real failures: SIGKILL, SIGSTOP past the lease, a poison pill,
Redis restarts and killed connections; and counters against ground truth after a mixed
workload run by 2 worker processes and 2 producer processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from platform_common.jobs.keys import QueueKeys
from tests.support.queue_handlers import behaviour, make_job
from tests.support.redis_server import RedisServer
from tests.support.sync_redis import sync_reply
from tests.support.worker_records import SyncClient, counters, result, run_log, runs
from tests.support.workers import FAST_SETTINGS, ROOT, WorkerGroup, wait_until

DINING = QueueKeys("dining")
HANDLER = "tests.support.queue_handlers:behave"
# A lapsed lease, the reaper and the backoff are one agent type's scripts on its one
# slot, the same on a cluster; the mixed workload (two producers, batches) runs on both.
ONE_SLOT = "a lease, the reaper and the backoff: one type's scripts on its one slot"


@pytest.fixture
def group(redis_url: str) -> Iterator[WorkerGroup]:
    with WorkerGroup(redis_url, "dining", HANDLER, env=FAST_SETTINGS) as workers:
        yield workers


def enqueue(redis_url: str, jobs: list[dict[str, Any]], tmp_path: Path, batch: bool = True) -> None:
    """Enqueue through a producer process (tests.support.queue_handlers produce)."""
    plan = tmp_path / f"plan-{jobs[0]['job_id']}.json"
    plan.write_text(json.dumps(jobs))
    subprocess.run(
        [sys.executable, "-m", "tests.support.queue_handlers", "produce", "--plan", str(plan),
         *(["--batch"] if batch else [])],
        cwd=ROOT, env={"QUEUE_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
        check=True, timeout=60,
    )  # fmt: skip


def status(client: SyncClient, job_id: str) -> str | None:
    """The status of the job's result, None while it has none."""
    stored = result(client, job_id)
    return None if stored is None else str(stored["status"])


@pytest.mark.single_node(ONE_SLOT)
def test_a_job_of_a_sigkilled_worker_completes_exactly_once_elsewhere(
    redis_url: str, client: SyncClient, group: WorkerGroup, tmp_path: Path
) -> None:
    doomed = group.start(concurrency=1)
    job = make_job(constraints=behaviour("sleep", seconds=1.0))
    enqueue(redis_url, [job], tmp_path)
    wait_until(lambda: runs(client, job["job_id"]))
    doomed.kill()
    survivor = group.start(concurrency=1)
    done = wait_until(lambda: result(client, job["job_id"]))
    assert done == {"status": "succeeded", "error": None,
                    "result": {"pid": survivor.pid, "attempt": 2, "task": job["task"]}}  # fmt: skip
    assert runs(client, job["job_id"]) == [(doomed.pid, 1), (survivor.pid, 2)]
    assert runs(client, job["job_id"], "finish") == [(survivor.pid, 2)]
    stats = counters(client)
    assert (stats["started"], stats["retried"], stats["completed"]) == (2, 1, 1)
    history = json.loads(sync_reply(client.hget(DINING.job(job["job_id"]), "history")) or "[]")
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "lost")]


@pytest.mark.single_node(ONE_SLOT)
def test_a_sigkilled_worker_leaks_no_slot_of_max_running(
    redis_url: str, client: SyncClient, group: WorkerGroup, tmp_path: Path
) -> None:
    """Under max_running 1 (queue/limits.py), a worker SIGKILLed with its job holds the
    slot only as long as its lease: the reaper takes it back, and another worker runs
    that job and the next one, one at a time, with the slot free afterwards."""
    client.hset(DINING.limits, "max_running", "1")
    doomed = group.start(concurrency=4)
    jobs = [make_job(constraints=behaviour("sleep", seconds=1.0)) for _ in range(2)]
    enqueue(redis_url, jobs, tmp_path)
    wait_until(lambda: run_log(client))
    doomed.kill()
    first = run_log(client)
    assert len(first) == 1  # the cap: one of the two started
    survivor = group.start(concurrency=4)
    for job in jobs:
        assert wait_until(lambda job=job: status(client, job["job_id"])) == "succeeded"
    after = run_log(client)[1:]
    assert [(pid, event) for _, pid, _, event in after] == [
        (survivor.pid, "start"), (survivor.pid, "finish"),
        (survivor.pid, "start"), (survivor.pid, "finish"),
    ]  # fmt: skip
    assert after[0][0] == after[1][0] and after[2][0] == after[3][0]  # never two at once
    assert client.zcard(DINING.leases) == 0
    last = make_job()
    enqueue(redis_url, [last], tmp_path)
    assert wait_until(lambda: status(client, last["job_id"])) == "succeeded"  # slot free


@pytest.mark.single_node(ONE_SLOT)
def test_a_sigkilled_worker_leaks_no_slot_of_max_running_per_key(
    redis_url: str, client: SyncClient, group: WorkerGroup, tmp_path: Path
) -> None:
    """Fair share by tenant with max_running_per_key 1 (include/fair_turns.lua): a worker
    SIGKILLed with tenant A's job holds A's slot only as long as its lease; meanwhile B's
    job runs, and after the reaper takes the lease back A's jobs run one at a time."""
    client.hset(DINING.limits, mapping={"fair_by": "tenant", "max_running_per_key": "1"})
    doomed = group.start(concurrency=4)
    a_jobs = [make_job(tenant="a", constraints=behaviour("sleep", seconds=1.0)) for _ in range(2)]
    enqueue(redis_url, a_jobs, tmp_path)
    wait_until(lambda: run_log(client))
    doomed.kill()
    assert len(run_log(client)) == 1  # A's cap: one of its two started
    b_job = make_job(tenant="b")
    enqueue(redis_url, [b_job], tmp_path)
    survivor = group.start(concurrency=4)
    assert wait_until(lambda: status(client, b_job["job_id"])) == "succeeded"
    for job in a_jobs:
        assert wait_until(lambda job=job: status(client, job["job_id"])) == "succeeded"
    a_ids = {job["job_id"] for job in a_jobs}
    after = [entry for entry in run_log(client)[1:] if entry[0] in a_ids]
    assert [(pid, event) for _, pid, _, event in after] == [
        (survivor.pid, "start"), (survivor.pid, "finish"),
        (survivor.pid, "start"), (survivor.pid, "finish"),
    ]  # fmt: skip
    assert after[0][0] == after[1][0] and after[2][0] == after[3][0]  # never two of A's at once
    assert client.zcard(DINING.leases) == 0
    assert not client.exists(DINING.fair_ring)  # every key drained


@pytest.mark.single_node(ONE_SLOT)
def test_a_paused_workers_stale_completion_is_refused(
    redis_url: str, client: SyncClient, group: WorkerGroup, tmp_path: Path
) -> None:
    paused = group.start(concurrency=1)
    job = make_job(constraints=behaviour("sleep", seconds=1.0))
    enqueue(redis_url, [job], tmp_path)
    wait_until(lambda: runs(client, job["job_id"]))
    paused.pause()
    other = group.start(concurrency=1)
    done = wait_until(lambda: result(client, job["job_id"]))
    paused.resume()
    paused.wait_for_log(f"lease lost job={job['job_id']}")
    assert done["result"]["pid"] == other.pid
    assert result(client, job["job_id"]) == done  # unchanged by the stale worker
    assert counters(client)["completed"] == 1
    assert paused.alive()
    assert paused.stop() == 0


@pytest.mark.single_node(ONE_SLOT)
def test_a_poison_pill_is_dead_lettered_after_exactly_three_attempts(
    redis_url: str, client: SyncClient, group: WorkerGroup, tmp_path: Path
) -> None:
    job = make_job(constraints=behaviour("crash"))
    enqueue(redis_url, [job], tmp_path)

    def dead_lettered() -> bool:
        # Each attempt kills its worker: keep one alive to run the next attempt and reap.
        if not any(worker.alive() for worker in group.workers):
            group.start(concurrency=1)
        return client.lrange(DINING.dead, 0, -1) == [job["job_id"]]

    wait_until(dead_lettered, timeout=60, interval=0.1)
    starts = runs(client, job["job_id"])
    assert [attempt for _, attempt in starts] == [1, 2, 3]
    assert len({pid for pid, _ in starts}) == 3  # each attempt killed its own worker
    history = json.loads(sync_reply(client.hget(DINING.job(job["job_id"]), "history")) or "[]")
    assert [(h["attempt"], h["outcome"]) for h in history] == [
        (1, "lost"),
        (2, "lost"),
        (3, "lost"),
    ]
    # Backoff 0.2 s then 0.4 s, in that order, each respected before the next attempt.
    assert [h["retry_at"] - h["ended_at"] for h in history[:2]] == [200, 400]
    assert history[0]["retry_at"] <= history[1]["started_at"]
    assert history[1]["retry_at"] <= history[2]["started_at"]
    assert "retry_at" not in history[2]
    stats = counters(client)
    assert (stats["started"], stats["retried"], stats["dead_lettered"], stats["failed"]) == (
        3,
        2,
        1,
        1,
    )
    assert status(client, job["job_id"]) == "failed"


def test_counters_equal_ground_truth_after_a_mixed_workload(
    redis_url: str, client: SyncClient, group: WorkerGroup, tmp_path: Path
) -> None:
    # 4 s of TTL left when the producer process enqueues them (queue_handlers
    # with_ttl_left): time for a worker to start them, too little for a 30 s sleep.
    plan = (
        [make_job(constraints=behaviour("ok")) for _ in range(20)]
        + [make_job(constraints=behaviour("fail_until", succeed_on=2)) for _ in range(5)]
        + [make_job(constraints=behaviour("fail")) for _ in range(3)]
        + [make_job(constraints=behaviour("fatal")) for _ in range(3)]
        + [make_job(constraints=behaviour("sleep", seconds=30)) | {"ttl_left": 4} for _ in range(3)]
    )
    group.start_many(2, concurrency=4)
    enqueue(redis_url, plan[0::2], tmp_path, batch=False)
    enqueue(redis_url, plan[1::2], tmp_path, batch=True)

    def finished() -> bool:
        stats = counters(client)
        return stats.get("completed", 0) + stats.get("failed", 0) + stats.get("expired", 0) == 34

    wait_until(finished, timeout=60, interval=0.1)
    stats = counters(client)
    starts = [entry for entry in run_log(client) if entry[3] == "start"]
    outcomes = [status(client, job["job_id"]) for job in plan]
    assert outcomes == ["succeeded"] * 25 + ["failed"] * 6 + ["expired"] * 3
    assert stats["enqueued"] == len(plan) == 34
    assert stats["started"] == len(starts) == 20 + 5 * 2 + 3 * 3 + 3 + 3
    assert stats["completed"] == 25 and stats["latency_count"] == 25
    assert sum(v for k, v in stats.items() if k.startswith("latency_le:")) == 25
    assert stats["retried"] == 5 + 3 * 2
    assert stats["failed"] == 3 + 3 and stats["dead_lettered"] == 3 == client.llen(DINING.dead)
    assert stats["expired"] == 3
    assert client.llen(DINING.queue) == client.llen(DINING.processing) == 0
    assert client.zcard(DINING.delayed) == client.zcard(DINING.leases) == 0
    assert client.zcard(DINING.workers) == 2


def test_workers_keep_consuming_after_client_kill_and_a_redis_restart(tmp_path: Path) -> None:
    with RedisServer(appendonly=True) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        with WorkerGroup(server.url, "dining", HANDLER, env=FAST_SETTINGS) as workers:
            worker = workers.start(concurrency=2)

            def round_trip(label: str) -> None:
                jobs = [make_job(task=f"{label} {i}") for i in range(3)]
                enqueue(server.url, jobs, tmp_path)
                for job in jobs:
                    wait_until(partial(result, client, job["job_id"]), timeout=30)

            round_trip("before")
            assert server.cli("CLIENT", "KILL", "TYPE", "normal") != "0"
            round_trip("after client kill")
            server.restart()
            client.close()
            round_trip("after restart")
            assert worker.alive()
            assert counters(client)["completed"] == 9
        client.close()


def test_the_cli_refuses_a_bad_handler_spec() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "platform_common.jobs.worker", "--agent-type", "dining",
         "--handler", "tests.support.queue_handlers:no_such_function"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT), "QUEUE_REDIS_URL": "redis://127.0.0.1:1/0"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--handler" in done.stderr and "no_such_function" in done.stderr
