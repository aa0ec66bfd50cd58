"""History benchmark (not a test): what the per-minute history costs Redis.

    .venv/bin/python -m bench.history [--calls 2000] [--rounds 5]

Starts its own redis-server. Per round:

1. `--calls` history calls that find their minute already sampled (what every worker but
   the first does each minute);
2. `--calls` calls each writing a new minute onto a full day (1,440 entries), so each
   also trims the oldest (the first worker's call, once a minute);
3. one XRANGE of the whole day as the console's day chart and `info --window 1d` read it.

Prints the median over the rounds of INFO commandstats' usec_per_call of EVALSHA (the
history script's whole run) for 1 and 2, XRANGE's for 3, and MEMORY USAGE of the full
history key of one agent type.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

import redis.asyncio as aioredis

from platform_common.jobs.keys import HISTORY_MINUTES
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs.worker import Chores
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer

AGENT_TYPE = "dining"
MINUTE = 60_000
T0 = 29_000_000 * MINUTE


async def _usec_per_call(client: aioredis.Redis, command: str) -> float:
    stats: dict[str, Any] = await client.info("commandstats")
    return float(stats[f"cmdstat_{command}"]["usec_per_call"])


async def run(calls: int, rounds: int) -> None:
    with RedisServer() as server:
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        queue = await JobQueue.connect(QueueSettings.from_url(server.url))
        chores = Chores(queue.connection, AGENT_TYPE)
        key = queue.connection.keys(AGENT_TYPE).history
        try:
            await queue.enqueue_many([make_job() for _ in range(100)])
            minute = T0
            for _ in range(HISTORY_MINUTES):
                assert (await chores.record_history(now_ms=minute)).wrote
                minute += MINUTE
            found, written, read = [], [], []
            for _ in range(rounds):
                await client.config_resetstat()
                for _ in range(calls):
                    assert not (await chores.record_history(now_ms=minute - MINUTE)).wrote
                found.append(await _usec_per_call(client, "evalsha"))
                await client.config_resetstat()
                for _ in range(calls):
                    assert (await chores.record_history(now_ms=minute)).wrote
                    minute += MINUTE
                written.append(await _usec_per_call(client, "evalsha"))
                assert await client.xlen(key) == HISTORY_MINUTES
                await client.config_resetstat()
                assert len(await client.xrange(key)) == HISTORY_MINUTES
                read.append(await _usec_per_call(client, "xrange"))
            memory = await client.memory_usage(key)
        finally:
            await queue.aclose()
            await client.aclose()
    print(f"history, median of {rounds} rounds (INFO commandstats usec_per_call)")
    print(f"{'minute already sampled (script)':40}{statistics.median(found):>10.1f} us")
    print(f"{'new sample onto a full day (script)':40}{statistics.median(written):>10.1f} us")
    day = f"XRANGE of the day ({HISTORY_MINUTES} entries)"
    print(f"{day:40}{statistics.median(read):>10.1f} us")
    print(f"{'MEMORY USAGE of a full day':40}{memory:>10,} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.calls, args.rounds))


if __name__ == "__main__":
    main()
