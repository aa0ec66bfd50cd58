"""Pause benchmark (not a test): how fast workers stop and start again, and what a pause
costs Redis.

    .venv/bin/python -m bench.pause [--rounds 100] [--workers 2] [--concurrency 8]

Starts its own redis-server and `--workers` worker processes (`python -m
platform_common.jobs worker`, default settings: a 1 s BLMOVE block) whose handler naps
20 ms, keeps a backlog of jobs waiting, and per round:

1. pauses while the workers are busy, then reads the `started` counter: a job started
   after `pause` returned would raise it later. Any such job is counted (it must be 0:
   the claim script reads the pause in the same step that would start a job);
2. waits 0.5 s (the running jobs finish), then counts for 1 s the scripts and BLMOVEs
   Redis runs (INFO commandstats): what a paused fleet costs, against an idle fleet (the
   chores, e.g. the promoter's 4 calls a second, are in both);
3. after a random 0-1 s more (so the resume falls anywhere in the workers' second),
   resumes, and times the first job started after it (`started` polled every 2 ms): the
   resume latency, bounded by the workers' 1 s re-check.

Prints the p50/p99/max of the resume latency, the jobs started after a pause returned,
and Redis calls per worker and second while paused and while idle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer

AGENT_TYPE = "dining"
KEYS = QueueKeys(AGENT_TYPE)
ROOT = Path(__file__).resolve().parents[1]
BACKLOG = 400
SETTLE_SECONDS = 0.5
"""After pause returned: the jobs running then finish (their completions are no cost of
the pause) before the paused calls are counted."""
PAUSED_SECONDS = 1.0
POLL_SECONDS = 0.002


def _workers(url: str, count: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, QUEUE_REDIS_URL=url, PYTHONPATH=str(ROOT))
    command = [
        sys.executable, "-m", "platform_common.jobs", "worker", "--agent-type", AGENT_TYPE,
        "--handler", "bench.handlers:naps", "--concurrency", str(concurrency),
    ]  # fmt: skip
    return [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]


async def _started(client: aioredis.Redis) -> int:
    return int(await client.hget(KEYS.stats, "started") or 0)


async def _calls(client: aioredis.Redis) -> int:
    """Scripts and BLMOVEs Redis has run (what a worker sends to fetch)."""
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("evalsha", "eval", "blmove")
    )


async def _topped_up(queue: JobQueue) -> None:
    waiting = (await queue.stats(AGENT_TYPE)).queued
    if waiting < BACKLOG:
        await queue.enqueue_many([make_job(ttl_seconds=600) for _ in range(BACKLOG - waiting)])


async def _first_start_after(client: aioredis.Redis, before: int) -> float:
    """Seconds until `started` passes `before`: polled, Redis has no event for it."""
    began = time.monotonic()
    while True:
        if await _started(client) > before:
            return time.monotonic() - began
        await asyncio.sleep(POLL_SECONDS)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(rounds: int, workers: int, concurrency: int) -> None:
    with RedisServer() as server:
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        queue = await JobQueue.connect(QueueSettings.from_url(server.url))
        processes = _workers(server.url, workers, concurrency)
        try:
            await _topped_up(queue)
            await _first_start_after(client, 4 * workers * concurrency)  # all up and busy
            latencies: list[float] = []
            late_starts = 0
            paused_calls = 0.0
            for _ in range(rounds):
                await _topped_up(queue)
                await queue.pause(AGENT_TYPE)
                at_pause = await _started(client)
                await asyncio.sleep(SETTLE_SECONDS)
                calls_before = await _calls(client)
                await asyncio.sleep(PAUSED_SECONDS)
                paused_calls += (await _calls(client) - calls_before) / PAUSED_SECONDS
                # A pause of any length: the resume falls anywhere in the workers' second.
                await asyncio.sleep(random.uniform(0, 1))
                before = await _started(client)
                late_starts += before - at_pause
                await queue.resume(AGENT_TYPE)
                latencies.append(await _first_start_after(client, before))
            # An idle fleet, for comparison: nothing waits, every worker in BLMOVE.
            await client.delete(KEYS.queue, KEYS.queued, KEYS.waiting)
            await asyncio.sleep(2)
            calls_before = await _calls(client)
            await asyncio.sleep(5)
            idle_calls = (await _calls(client) - calls_before) / 5
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(30)
            await queue.aclose()
            await client.aclose()
    print(f"rounds {rounds}, {workers} worker processes x {concurrency} slots, 20 ms jobs")
    p50, p99 = (_quantile(latencies, q) * 1000 for q in (0.5, 0.99))
    print(
        f"resume -> first job started: p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms"
    )
    print(f"jobs started after pause() returned: {late_starts}")
    print(
        f"Redis calls per worker and second: paused {paused_calls / rounds / workers:.2f}, "
        f"idle (BLMOVE) {idle_calls / workers:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(run(args.rounds, args.workers, args.concurrency))


if __name__ == "__main__":
    main()
