"""Soak: sustained load for a few minutes; prints worker RSS, Redis memory and key count
over time, which must stay flat once the job TTL has passed (TTLs and cleanup bound
them). Not a test: run it by hand.

    .venv/bin/python -m bench.soak --duration 180 --rate 300
    .venv/bin/python -m bench.soak --redis-url redis://host:6379/0   # an existing Redis

By default it starts its own redis-server (AOF everysec, as docs/operations.md
recommends), worker processes from the worker CLI, and produces from this process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=300.0, help="jobs enqueued per second")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per type")
    parser.add_argument("--types", default="dining,flights", help="agent types")
    parser.add_argument("--ttl", type=int, default=20, help="job (and result) TTL, seconds")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    return parser.parse_args()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_workers(url: str, types: list[str], per_type: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUEUE_REDIS_URL": url,
           "QUEUE_AGENT_TYPES": ",".join(types), "QUEUE_CLEANUP_INTERVAL": "2"}  # fmt: skip
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "platform_common.jobs.worker",
                "--agent-type",
                agent_type,
                "--handler",
                "platform_common.jobs.queue.builtin:echo",
                "--concurrency",
                "20",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            env=env,
        )
        for agent_type in types
        for _ in range(per_type)
    ]


def job(agent_type: str, ttl: int) -> dict[str, object]:
    return {
        "job_id": str(uuid.uuid4()),
        "session_id": "soak",
        "orchestrator_id": "soak",
        "agent_type": agent_type,
        "task": "soak " * 40,  # ~300-byte payloads, like the documented example
        "constraints": {"party": 2, "budget": 200},
        "curated_shortlist": ["a", "b", "c"],
        "result_format": "RestaurantOption[]",
        "created_at": datetime.now(UTC).isoformat(),
        "ttl_seconds": ttl,
    }


async def produce(queue: JobQueue, types: list[str], args: argparse.Namespace) -> int:
    """Enqueue at `rate` jobs/s in batches of 1/10 s; returns how many."""
    sent = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < args.duration:
        due = int(elapsed * args.rate) - sent
        if due > 0:
            batch = [job(types[(sent + i) % len(types)], args.ttl) for i in range(due)]
            await queue.enqueue_many(batch)
            sent += due
        await asyncio.sleep(0.1)
    return sent


async def sample(
    queue: JobQueue,
    client: redis.Redis,
    workers: list[subprocess.Popen[bytes]],
    types: list[str],
    args: argparse.Namespace,
    rows: list[tuple[float, float, float, int]],
) -> None:
    started = time.monotonic()
    print(f"{'t(s)':>6} {'enqueued':>9} {'completed':>9} {'worker RSS MiB':>15} "
          f"{'redis used MiB':>15} {'DBSIZE':>8}")  # fmt: skip
    while True:
        await asyncio.sleep(args.every)
        enqueued = completed = 0
        for agent_type in types:
            stats = await queue.stats(agent_type)
            enqueued += stats.counters["enqueued"]
            completed += stats.counters["completed"]
        rss = max(rss_mib(w.pid) for w in workers)
        memory: dict[str, Any] = client.info("memory")  # type: ignore[assignment]
        used = int(memory["used_memory"]) / 2**20
        keys = int(client.dbsize())  # type: ignore[arg-type]
        elapsed = time.monotonic() - started
        rows.append((elapsed, rss, used, keys))
        print(f"{elapsed:6.0f} {enqueued:9d} {completed:9d} {rss:15.1f} {used:15.1f} {keys:8d}",
              flush=True)  # fmt: skip


def verdict(rows: list[tuple[float, float, float, int]], ttl: int) -> None:
    """Compare the last sample with the first one taken after two TTLs (warm-up)."""
    steady = [row for row in rows if row[0] >= 2 * ttl]
    if len(steady) < 2:
        print("run longer than 2 x TTL + 2 samples for a verdict")
        return
    first, last = steady[0], steady[-1]
    for name, index in (("worker RSS", 1), ("Redis used_memory", 2), ("DBSIZE", 3)):
        ratio = last[index] / first[index] if first[index] else float("inf")
        flat = "flat" if ratio <= 1.2 else "GROWING"
        print(f"{name:18} {first[index]:10.1f} -> {last[index]:10.1f}  x{ratio:.2f}  {flat}")


async def main() -> None:
    args = parse_args()
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    server = None
    url = args.redis_url
    if url is None:
        server = RedisServer(appendonly=True, appendfsync="everysec").start()
        url = server.url
    settings = QueueSettings.from_url(url, agent_types=tuple(types))
    workers = start_workers(url, types, args.workers)
    client = redis.Redis.from_url(url.split("?")[0], decode_responses=True)
    rows: list[tuple[float, float, float, int]] = []
    print(f"soak: {args.rate:.0f} jobs/s for {args.duration:.0f}s, TTL {args.ttl}s, "
          f"{len(workers)} worker processes, Redis {settings.redis.redacted_url()}")  # fmt: skip
    try:
        async with await JobQueue.connect(settings) as queue:
            sampler = asyncio.create_task(sample(queue, client, workers, types, args, rows))
            sent = await produce(queue, types, args)
            sampler.cancel()
        print(f"enqueued {sent} jobs")
        verdict(rows, args.ttl)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
        client.close()
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
