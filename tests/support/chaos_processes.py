"""The processes of the chaos run (tests/end_to_end/test_chaos.py): workers and producers as real
OS processes, started with `python -m tests.support.chaos_processes worker|producer ...`.

No tests here. Each process appends what it did to a JSON-lines ledger of its own
(O_APPEND writes, which survive SIGKILL), which the controller reads back as ground
truth: which job runs started and returned, which enqueues were acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.queue import JobPayload, JobQueue, QueueSettings, current_job
from platform_common.jobs.worker import Worker

TYPES = ("dining", "flights", "dmc")
CONCURRENCY = 8
# Settings shared by every process of the run, short so the run stays short: a lease
# of 2 s renewed every 0.67 s, reaped within 0.5 s of expiring.
QUEUE_SETTINGS: dict[str, Any] = {
    "agent_types": TYPES,
    "lease_seconds": 2.0,
    "reaper_interval": 0.5,
    "promote_interval": 0.1,
    "heartbeat_interval": 1.0,
    "block_timeout": 0.5,
    "cleanup_interval": 0.5,
    "backoff_base": 0.2,
    "backoff_factor": 2.0,
    "shutdown_timeout": 5.0,
    "pool_min": 2,
}
ENQUEUE_SECONDS = 12.0
"""How long the producers spread their enqueues over, so the faults meet traffic."""
STALL_SECONDS = 30.0
"""A stalling handler sleeps this long: far past its job's TTL, so the job expires."""


class Ledger:
    """Append-only JSON lines, one file per process, each line one os.write."""

    def __init__(self, directory: Path, role: str) -> None:
        path = directory / f"{role}-{os.getpid()}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **entry: Any) -> None:
        entry["pid"] = os.getpid()
        entry["t"] = time.time()
        os.write(self._fd, (json.dumps(entry) + "\n").encode())


def read_ledgers(directory: Path, role: str) -> list[dict[str, Any]]:
    entries = []
    for path in sorted(directory.glob(f"{role}-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():  # a SIGKILL can only cut after a whole os.write
                entries.append(json.loads(line))
    return entries


# -- workers ---------------------------------------------------------------------------
_ledger: Ledger | None = None


async def chaos_handler(job: JobPayload) -> dict[str, str]:
    """Records its run, then behaves as the job's `kind` says."""
    assert _ledger is not None
    run = uuid.uuid4().hex[:12]
    _ledger.write(e="start", job=job.job_id, run=run, attempt=current_job().attempt)
    kind = job.constraints["kind"]
    if kind == "poison":
        raise RuntimeError("poison pill: this job always fails")
    await asyncio.sleep(STALL_SECONDS if kind == "stall" else job.constraints["ms"] / 1000)
    _ledger.write(e="end", job=job.job_id, run=run)
    return {"run": run}


async def run_workers(url: str, ledger_dir: Path) -> None:
    global _ledger
    _ledger = Ledger(ledger_dir, "worker")
    settings = QueueSettings.from_url(url, **QUEUE_SETTINGS)
    workers = [Worker(settings, t, chaos_handler, concurrency=CONCURRENCY) for t in TYPES]

    def stop_all() -> None:
        for worker in workers:
            worker.stop()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_all)
    runs = [asyncio.create_task(worker.run()) for worker in workers]
    ready = asyncio.gather(*(worker.ready.wait() for worker in workers))
    started: list[asyncio.Future[Any]] = [ready, *runs]
    await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
    if ready.done():
        _ledger.write(e="ready")
    else:
        ready.cancel()
    await asyncio.gather(*runs)


# -- producers -------------------------------------------------------------------------
def plan_jobs(seed: int, count: int) -> list[dict[str, Any]]:
    """The whole run's jobs, the same for every process given the same seed."""
    rng = random.Random(seed)
    jobs = []
    for number in range(count):
        kind = rng.choices(("ok", "poison", "stall"), weights=(96, 3, 1))[0]
        jobs.append(
            {
                "job_id": f"chaos-{number:05d}",
                "agent_type": rng.choice(TYPES),
                "kind": kind,
                "ms": rng.randrange(20, 200),
                # Stalled jobs expire; their "expired" result lives as long as the TTL,
                # which must outlast the controller's read of it.
                "ttl_seconds": 8 if kind == "stall" else 900,
            }
        )
    return jobs


def payload(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_id": job["job_id"],
        "session_id": "chaos-session",
        "orchestrator_id": "chaos-controller",
        "agent_type": job["agent_type"],
        "task": "chaos",
        "constraints": {"kind": job["kind"], "ms": job["ms"]},
        "result_format": "dict",
        "created_at": datetime.now(UTC).isoformat(),
        "ttl_seconds": job["ttl_seconds"],
    }


async def run_producer(url: str, ledger_dir: Path, seed: int, count: int, index: int) -> None:
    """Enqueue this producer's half of the planned jobs, in random batches, paced; an
    enqueue whose outcome is unknown (Redis restarting) is retried job by job until it
    is acknowledged or found already there."""
    ledger = Ledger(ledger_dir, "producer")
    rng = random.Random(seed * 7 + index)
    mine = [job for job in plan_jobs(seed, count) if int(job["job_id"][-5:]) % 2 == index]
    queue = await JobQueue.connect(QueueSettings.from_url(url, **QUEUE_SETTINGS))
    try:
        position = 0
        while position < len(mine):
            batch = mine[position : position + rng.choice((1, 1, 5, 20, 40))]
            position += len(batch)
            await _enqueue(queue, batch, ledger)
            # Pacing (not synchronisation): spread the enqueues over ENQUEUE_SECONDS.
            await asyncio.sleep(ENQUEUE_SECONDS * len(batch) / len(mine) * rng.uniform(0.5, 1.5))
    finally:
        await queue.aclose()


async def _enqueue(queue: JobQueue, batch: list[dict[str, Any]], ledger: Ledger) -> None:
    try:
        if len(batch) == 1:
            await queue.enqueue(payload(batch[0]))
        else:
            await queue.enqueue_many([payload(job) for job in batch])
        for job in batch:
            ledger.write(e="acked", job=job["job_id"])
        return
    except (RedisError, OSError):
        pass  # unknown outcome: some or all may have landed
    for job in batch:
        delay = 0.05
        while True:
            try:
                await queue.enqueue(payload(job))
                ledger.write(e="acked", job=job["job_id"])
                break
            except InvalidPayload as exc:
                if set(exc.errors) != {"job_id"}:
                    raise
                ledger.write(e="acked", job=job["job_id"], retried=True)  # it had landed
                break
            except (RedisError, OSError):
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("worker", "producer"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--index", type=int, default=0)
    args = parser.parse_args(argv)
    if args.role == "worker":
        asyncio.run(run_workers(args.url, args.ledger))
    else:
        asyncio.run(run_producer(args.url, args.ledger, args.seed, args.count, args.index))


if __name__ == "__main__":
    main(sys.argv[1:])
