"""The exporter against the real queue: worker and producer processes, exact numbers.

Two dining workers and one flights worker (`python -m platform_common.jobs.worker`) and
a producer process run a mixed workload: quick and slow jobs, flaky jobs that fail once
and succeed on the retry, poison pills that use all three attempts and reach the
dead-letter list, and jobs refused as non-retryable. While it runs the exporter is
scraped again and again (no counter or bucket may go down); afterwards every counter
and histogram count equals what happened, and the depths equal what Redis holds.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, NonRetryableError, current_job
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from platform_common.jobs_exporter.snapshot import Snapshot
from tests.support.sync_redis import sync_reply

# Per agent type: how many jobs of each kind the producer sends.
PLAN = {
    "dining": {"ok": 30, "slow": 6, "flaky": 8, "poison": 3, "refused": 3},
    "flights": {"ok": 12, "slow": 2, "flaky": 2, "poison": 1, "refused": 0},
}
WORKERS = {"dining": 2, "flights": 1}


async def handler(job: JobPayload) -> dict[str, Any]:
    """The workers' handler: behaves as the job's `constraints.kind` says."""
    kind = job.constraints["kind"]
    if kind == "slow":
        await asyncio.sleep(0.3)
    elif kind == "flaky" and current_job().attempt == 1:
        raise RuntimeError("flaky: fails on its first attempt")
    elif kind == "poison":
        raise RuntimeError("poison pill: fails every attempt")
    elif kind == "refused":
        raise NonRetryableError("malformed task")
    return {"kind": kind}


async def produce(url: str) -> None:
    """The producer process: enqueue every planned job, interleaved across types."""
    from platform_common.jobs.queue import JobQueue

    queue = await JobQueue.connect(url)
    try:
        for agent_type, kinds in PLAN.items():
            for kind, count in kinds.items():
                for number in range(count):
                    await queue.enqueue({
                        "job_id": f"{agent_type}-{kind}-{number}",
                        "session_id": "session-1",
                        "orchestrator_id": "orch-1",
                        "agent_type": agent_type,
                        "task": f"a {kind} job",
                        "constraints": {"kind": kind},
                        "created_at": datetime.now(UTC).isoformat(),
                        "result_format": "Echo",
                        "ttl_seconds": 600,
                    })  # fmt: skip
    finally:
        await queue.aclose()


def expected(kinds: dict[str, int]) -> dict[str, int]:
    """Counter values once every job has settled (max_attempts 3)."""
    total = sum(kinds.values())
    return {
        "enqueued": total,
        "completed": kinds["ok"] + kinds["slow"] + kinds["flaky"],
        "failed": kinds["poison"] + kinds["refused"],
        "dead_lettered": kinds["poison"],
        "retried": kinds["flaky"] + 2 * kinds["poison"],
        "started": kinds["ok"] + kinds["slow"] + 2 * kinds["flaky"] + 3 * kinds["poison"]
        + kinds["refused"],
        "expired": 0,
        "held_back_rate": 0,  # (no limits)
        "held_back_max_running": 0,
        "cancelled": 0,
        "held_back_max_running_per_key": 0,
    }  # fmt: skip


@pytest.fixture
def environment(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "REDIS_URL"))}
    env.update(
        QUEUE_REDIS_URL=redis_url,
        QUEUE_BACKOFF_BASE="0.05",  # retries within the test, not after seconds
        QUEUE_HEARTBEAT_INTERVAL="0.5",
        PYTHONPATH=os.getcwd(),
    )
    return env


@pytest.fixture
def workers(environment: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "platform_common.jobs.worker",
                "--agent-type",
                agent_type,
                "--handler",
                "tests.exporter.test_workload:handler",
                "--concurrency",
                "4",
                "--worker-id",
                f"{agent_type}-{index}",
                "--log-level",
                "WARNING",
            ],
            env=environment,
        )
        for agent_type, count in WORKERS.items()
        for index in range(count)
    ]
    try:
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def monotonic_values(snapshot: Snapshot) -> dict[tuple[str, str], float]:
    """Every value that must never decrease between two scrapes."""
    values: dict[tuple[str, str], float] = {}
    for t in snapshot.types:
        values.update({(t.agent_type, name): value for name, value in t.counters.items()})
        if t.latency is not None:
            values.update({(t.agent_type, f"le={b}"): c for b, c in t.latency.buckets})
            values[(t.agent_type, "latency_sum")] = t.latency.sum
    return values


def settled(snapshot: Snapshot) -> bool:
    return {t.agent_type: dict(t.counters) for t in snapshot.types} == {
        agent_type: expected(kinds) for agent_type, kinds in PLAN.items()
    }


async def test_counters_and_depths_are_exact_after_a_real_workload(
    redis_url: str, environment: dict[str, str], workers: list[subprocess.Popen[bytes]]
) -> None:
    settings = ExporterSettings.from_args(
        ["--redis-url", redis_url, "--agent-types", "dining,flights"]
    )
    exporter = Exporter(settings)
    code = (
        f"import asyncio, tests.exporter.test_workload as w; asyncio.run(w.produce({redis_url!r}))"
    )
    producer = await asyncio.create_subprocess_exec(sys.executable, "-c", code, env=environment)
    previous: dict[tuple[str, str], float] = {}
    scrapes = 0
    deadline = time.monotonic() + 90
    try:
        while True:
            result = await exporter.scrape()
            assert result.snapshot is not None
            assert result.snapshot.malformed == 0
            current = monotonic_values(result.snapshot)
            went_down = {
                k: (v, current.get(k)) for k, v in previous.items() if current.get(k, -1) < v
            }
            assert not went_down, f"scrape {scrapes}: values went backwards: {went_down}"
            previous, scrapes = current, scrapes + 1
            if producer.returncode is not None and settled(result.snapshot):
                break
            assert time.monotonic() < deadline, f"workload did not settle: {result.snapshot}"
            await asyncio.sleep(0.05)  # pacing between scrapes, not synchronisation
        assert producer.returncode == 0
        final = result.snapshot
        admin = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            for t in final.types:
                keys = QueueKeys(t.agent_type)
                kinds = PLAN[t.agent_type]
                assert dict(t.counters) == expected(kinds)
                assert t.queue_depth == admin.zcard(keys.waiting) == 0
                assert t.dead_letter_depth == admin.llen(keys.dead) == kinds["poison"]
                assert t.in_progress == admin.llen(keys.processing) == 0
                assert t.delayed_depth == admin.zcard(keys.delayed) == 0
                assert t.latency is not None
                assert t.latency.count == expected(kinds)["completed"]
                assert t.latency.count == int(
                    sync_reply(admin.hget(keys.stats, "latency_count")) or 0
                )
                # Slow jobs took at least 0.3 s: they are above the 0.25 s bucket.
                assert t.latency.count - dict(t.latency.buckets)[0.25] >= kinds["slow"]
                assert t.active_workers == WORKERS[t.agent_type]
                assert t.last_heartbeat_seconds is not None
        finally:
            admin.close()
        assert scrapes > 3  # the never-backwards check saw the workload in flight

        # A job nobody works on: its age comes from the hash the real enqueue wrote.
        from platform_common.jobs.queue import JobQueue

        queue = await JobQueue.connect(redis_url)
        try:
            await queue.enqueue({
                "job_id": "dmc-waiting-1", "session_id": "s", "orchestrator_id": "o",
                "agent_type": "dmc", "task": "t", "result_format": "r",
                "created_at": datetime.now(UTC).isoformat(), "ttl_seconds": 600,
            })  # fmt: skip
        finally:
            await queue.aclose()
        later = await exporter.scrape()
        assert later.snapshot is not None
        [dmc] = [t for t in later.snapshot.types if t.agent_type == "dmc"]
        assert dmc.queue_depth == 1
        assert dmc.oldest_age_seconds is not None and 0 <= dmc.oldest_age_seconds < 60
    finally:
        if producer.returncode is None:
            producer.kill()
            await producer.wait()
        await exporter.aclose()
