"""Promotion benchmark (not a test): the promoter's Redis cost with many scheduled jobs
waiting, against none.

    .venv/bin/python -m bench.schedule [--delayed 100000] [--due 1000] [--calls 2000] [--rounds 5]

Starts its own redis-server. For each side (0 jobs delayed for later, then `--delayed`
scheduled an hour ahead with enqueue_many(delay=...)), per round:

1. `--calls` promoter runs with nothing due (what every worker does 4 times a second);
2. `--due` jobs scheduled with delay=0, then one promoter run that moves them all.

Prints the median over the rounds of INFO commandstats' usec_per_call of EVALSHA (the
promote script's whole run) for each, per side, and their ratio: the promoter reads
ZRANGEBYSCORE -inf now LIMIT 0 1000, so its cost follows the jobs due, not the jobs
delayed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

import redis.asyncio as aioredis

from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs.worker import Chores
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer

AGENT_TYPE = "dining"
CHUNK = 5000


async def _usec_per_call(client: aioredis.Redis) -> float:
    stats: dict[str, Any] = await client.info("commandstats")
    return float(stats["cmdstat_evalsha"]["usec_per_call"])


async def _side(
    client: aioredis.Redis, queue: JobQueue, delayed: int, due: int, calls: int, rounds: int
) -> tuple[float, float]:
    await client.flushall()
    chores = Chores(queue.connection, AGENT_TYPE)
    for start in range(0, delayed, CHUNK):
        jobs = [make_job(ttl_seconds=7200) for _ in range(min(CHUNK, delayed - start))]
        await queue.enqueue_many(jobs, delay=3600)
    idle, moving = [], []
    for _ in range(rounds):
        await client.config_resetstat()
        for _ in range(calls):
            assert await chores.promote() == 0
        idle.append(await _usec_per_call(client))
        await queue.enqueue_many([make_job() for _ in range(due)], delay=0)
        await client.config_resetstat()
        assert await chores.promote() == due
        moving.append(await _usec_per_call(client))
        await client.delete(queue.connection.keys(AGENT_TYPE).queue)
    return statistics.median(idle), statistics.median(moving)


async def run(delayed: int, due: int, calls: int, rounds: int) -> None:
    with RedisServer() as server:
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        queue = await JobQueue.connect(QueueSettings.from_url(server.url))
        try:
            empty = await _side(client, queue, 0, due, calls, rounds)
            full = await _side(client, queue, delayed, due, calls, rounds)
        finally:
            await queue.aclose()
            await client.aclose()
    print(f"promote script, median of {rounds} rounds (INFO commandstats usec_per_call)")
    print(f"{'':32}{'0 delayed':>14}{f'{delayed:,} delayed':>18}{'ratio':>8}")
    for name, index in ((f"nothing due ({calls} calls)", 0), (f"{due} due (one call)", 1)):
        ratio = full[index] / empty[index]
        print(f"{name:32}{empty[index]:>11.1f} us{full[index]:>15.1f} us{ratio:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--delayed", type=int, default=100_000)
    parser.add_argument("--due", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.delayed, args.due, args.calls, args.rounds))


if __name__ == "__main__":
    main()
