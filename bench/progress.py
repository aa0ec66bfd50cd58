"""Progress benchmark (not a test): what a report costs Redis, and that a handler
reporting every 10 ms is held to the rate limit.

    .venv/bin/python -m bench.progress [--calls 20000] [--rounds 5] [--seconds 3]

Starts its own redis-server (no persistence).

1. Redis CPU per call: `--calls` progress script calls (EVALSHA, pipelines of 100) on
   one running job, with a report of about 100 bytes and one of 16 KiB (the default
   limit), each round after CONFIG RESETSTAT; then as many renewals of the same job's
   lease (queue_renew), the call every running job already makes, for scale. Prints the
   median over the rounds of INFO commandstats' usec_per_call (the script's whole run)
   and its min-max.
2. The rate limit: a Worker in this process runs one job whose handler reports
   `{"tick": n}` every 10 ms for `--seconds`, then a last one, and returns. A subscriber counts the
   events (one per stored report). Prints reports made, reports stored, stored per
   second against the limit (1 / QUEUE_PROGRESS_INTERVAL), and whether the last report
   stored is the last one made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, QueueSettings, current_job
from platform_common.jobs.redis.script import Script
from platform_common.jobs.worker import Worker
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer

KEYS = QueueKeys("dining")
JOB_ID = "bench-job"
TOKEN = "bench-token"
PIPELINE = 100
SMALL = json.dumps({"checked": 12, "of": 40, "last": "sukiyabashi-jiro", "eta_seconds": 31})
LARGE = json.dumps({"log": "x" * (16 * 1024 - 20)})


def _raw(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _usec_per_call(client: redis.Redis, script: Script, keys: list[str], args: list[Any]) -> float:
    _raw(client, "CONFIG", "RESETSTAT")
    pipe = client.pipeline(transaction=False)
    for _ in range(PIPELINE):
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    for reply in pipe.execute(raise_on_error=True):
        assert reply == [] or reply[0] == b"ok", reply  # renewed, or stored
    stats: dict[str, Any] = client.info("commandstats")
    return float(stats["cmdstat_evalsha"]["usec_per_call"])


def script_cpu(url: str, calls: int, rounds: int) -> None:
    client = redis.Redis.from_url(url)
    progress, renew = Script.named("queue_progress"), Script.named("queue_renew")
    for script in (progress, renew):
        _raw(client, "SCRIPT", "LOAD", script.source)
    client.hset(KEYS.job(JOB_ID), mapping={"state": "running", "token": TOKEN})
    client.zadd(KEYS.leases, {JOB_ID: 0})
    variants = {
        "progress, ~100 B report": (
            progress, [KEYS.job(JOB_ID)],
            [JOB_ID, TOKEN, SMALL, 16384, KEYS.progress_channel],
        ),
        "progress, 16 KiB report": (
            progress, [KEYS.job(JOB_ID)],
            [JOB_ID, TOKEN, LARGE, 16384, KEYS.progress_channel],
        ),
        "renew (for scale)": (renew, [KEYS.leases, KEYS.job(JOB_ID)], [10_000, JOB_ID, TOKEN]),
    }  # fmt: skip
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (script, keys, args) in variants.items():
            batches = [_usec_per_call(client, script, keys, args) for _ in range(calls // PIPELINE)]
            results[name].append(statistics.fmean(batches))
    print(f"Redis CPU per call (usec_per_call of EVALSHA), {calls} calls x {rounds} rounds:")
    for name, values in results.items():
        print(
            f"  {name:26} median {statistics.median(values):6.2f} us "
            f"(min {min(values):.2f}, max {max(values):.2f})"
        )
    client.close()


async def rate_limit(url: str, seconds: float) -> None:
    settings = QueueSettings.from_url(url)
    made: list[int] = []

    async def ticking(job: JobPayload) -> str:
        context = current_job()
        ends = time.monotonic() + seconds
        tick = 0
        while time.monotonic() < ends:
            tick += 1
            await context.report_progress({"tick": tick, "last": False})
            made.append(tick)
            await asyncio.sleep(0.01)
        await context.report_progress({"tick": tick + 1, "last": True})
        made.append(tick + 1)
        return "done"

    async with await JobQueue.connect(settings) as queue:
        job = make_job(ttl_seconds=600)
        stored: list[int] = []
        finished = asyncio.Event()
        worker = Worker(settings, "dining", ticking, concurrency=1)
        running = asyncio.create_task(worker.run())
        async with queue.progress_events("dining") as events:
            counting = asyncio.create_task(_count(events, stored, finished))
            await asyncio.sleep(0.5)  # subscribed before the job starts
            await queue.enqueue(job)
            await asyncio.wait_for(finished.wait(), seconds + 30)
            counting.cancel()
        worker.stop()
        await running
        last = await queue.progress("dining", job["job_id"])
    rate = len(stored) / seconds
    print(f"a handler reporting every 10 ms for {seconds:g} s (QUEUE_PROGRESS_INTERVAL 0.1 s):")
    print(f"  reports made {len(made)}, stored {len(stored)}: {rate:.1f} stored/s (limit 10/s)")
    print(
        f"  last made {made[-1]}, last stored {stored[-1] if stored else None}, "
        f"kept after completion {last.data if last else None}"
    )


async def _count(events: Any, stored: list[int], finished: asyncio.Event) -> None:
    async for report in events:
        stored.append(int(report.data["tick"]))
        if report.data["last"]:
            finished.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with RedisServer() as server:
        script_cpu(server.url, args.calls, args.rounds)
        asyncio.run(rate_limit(server.url, args.seconds))


if __name__ == "__main__":
    main()
