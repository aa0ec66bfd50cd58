"""Rate-limit benchmark (not a test): how closely a fleet of worker processes keeps to an
agent type's rate, and what a throttled fleet costs Redis.

    .venv/bin/python -m bench.rate_limit [--rate 100] [--seconds 60] [--workers 4]
                                        [--concurrency 8]

Starts its own redis-server and `--workers` worker processes (`python -m
platform_common.jobs worker`, default settings) whose handler naps 20 ms, sets the type's
rate to `--rate`/s (burst: the default, the rate's count), keeps a backlog far above what
the rate lets start, and after a 3 s warm-up reads the `started` counter once a second
for `--seconds`: prints the mean starts per second against the limit (and its error), the
worst one-second window, and the Redis commands per second over the run (INFO
commandstats: every command, the claims and completions included) and per start. Then
the same fleet idle (nothing waits: each worker blocks in BLMOVE) for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
WARM_UP_SECONDS = 3.0


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


async def _calls(client: aioredis.Redis) -> dict[str, int]:
    """Calls per command so far (INFO commandstats: the commands scripts call count too)."""
    stats: dict[str, Any] = await client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}


def _rates(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    return {name: (calls - before.get(name, 0)) / seconds for name, calls in after.items()}


def _sent(rates: dict[str, float]) -> float:
    """What workers sent: scripts (EVALSHA, EVAL; the commands a script runs are counted
    apart by commandstats) and BLMOVE."""
    return sum(rates.get(name, 0.0) for name in ("evalsha", "eval", "blmove"))


async def run(rate: int, seconds: int, workers: int, concurrency: int) -> None:
    backlog = rate * (seconds + 10) + 1000
    with RedisServer() as server:
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        queue = await JobQueue.connect(QueueSettings.from_url(server.url))
        await queue.set_limits(AGENT_TYPE, rate=f"{rate}/s")
        for start in range(0, backlog, 2000):
            batch = min(2000, backlog - start)
            await queue.enqueue_many([make_job(ttl_seconds=3600) for _ in range(batch)])
        processes = _workers(server.url, workers, concurrency)
        try:
            await asyncio.sleep(WARM_UP_SECONDS)
            per_second: list[int] = []
            began = time.monotonic()
            first, calls_before = await _started(client), await _calls(client)
            previous = first
            for tick in range(1, seconds + 1):
                await asyncio.sleep(max(0.0, began + tick - time.monotonic()))
                now = await _started(client)
                per_second.append(now - previous)
                previous = now
            elapsed = time.monotonic() - began
            throttled = _rates(calls_before, await _calls(client), elapsed)
            starts = (previous - first) / elapsed
            # The same fleet idle: nothing waits, every worker blocks in BLMOVE.
            await client.delete(KEYS.queue, KEYS.queued, KEYS.waiting)
            await asyncio.sleep(2)
            idle_before = await _calls(client)
            await asyncio.sleep(5)
            idle = _rates(idle_before, await _calls(client), 5)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(30)
            await queue.aclose()
            await client.aclose()
    print(f"rate {rate}/s, {workers} worker processes x {concurrency} slots, 20 ms jobs, "
          f"{seconds} s")  # fmt: skip
    print(f"starts per second: mean {starts:.2f} ({(starts / rate - 1) * 100:+.2f}% of the "
          f"limit), one-second windows min {min(per_second)} max {max(per_second)}")  # fmt: skip
    sent = _sent(throttled)
    print(f"Redis calls per second while throttled: {sent:.0f} ({sent / max(starts, 1e-9):.2f} "
          f"per start: claims, completions and chores), of which EVALSHA "
          f"{throttled.get('evalsha', 0):.0f}; idle fleet: {_sent(idle):.0f}")  # fmt: skip
    print(f"all commands (the scripts' own included) per second: throttled "
          f"{sum(throttled.values()):.0f}, idle {sum(idle.values()):.0f}")  # fmt: skip
    top = sorted(throttled.items(), key=lambda item: -item[1])[:8]
    print("busiest while throttled: " + ", ".join(f"{n} {r:.0f}/s" for n, r in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(run(args.rate, args.seconds, args.workers, args.concurrency))


if __name__ == "__main__":
    main()
