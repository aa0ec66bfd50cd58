"""Scrape cost of the exporter: latency and Redis round trips per scrape (not a test).

    .venv/bin/python -m bench.scrape [--scrapes 200]

Starts its own redis-server, fills it in the queue's key layout, and times
`Exporter.scrape()` + rendering the exposition (what GET /metrics does, without HTTP)
for 5, 100 and 1,000 agent types, and for 1,000 vs 1,000,000 queued jobs. Round trips
are counted on the client (socket writes: a pipeline is one) and cross-checked on the
server (INFO commandstats: commands per scrape). Prints a table and the targets:
one round trip per scrape whatever the number of types; 1e6 queued within 1.2x of 1e3;
100 types under 50 ms p99.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.asyncio.connection import Connection

from platform_common.jobs.keys import QueueKeys, latency_bucket_field
from platform_common.jobs_exporter.reader import make_exporter_client
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.redis_server import RedisServer

FILL_BATCH = 10_000  # ids per LPUSH: 100 commands fill a million


class CountingConnection(Connection):
    """Counts socket writes: one per command, or one per pipeline."""

    writes = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).writes += 1
        await super().send_packed_command(command, check_health)


@dataclass
class Row:
    scenario: str
    types: int
    queued: int
    median_ms: float
    p99_ms: float
    round_trips: float
    commands: float


def fill(admin: redis.Redis, types: int, jobs_per_type: int) -> None:
    admin.flushall()
    now_ms = int(admin.time()[0]) * 1000
    pipe = admin.pipeline(transaction=False)
    stats = {
        "enqueued": jobs_per_type + 50, "started": 50, "completed": 45, "failed": 5,
        "retried": 7, "dead_lettered": 5, "expired": 0,
        latency_bucket_field(0.5): 30, latency_bucket_field(2.5): 15,
        "latency_sum": "21.5", "latency_count": 45,
    }  # fmt: skip
    for index in range(types):
        keys = QueueKeys(f"type{index:04d}")
        pipe.sadd(QueueKeys.types_key(), keys.agent_type)
        pipe.hset(keys.stats, mapping=stats)
        pipe.zadd(keys.workers, {"w1": now_ms, "w2": now_ms - 60_000})
        pipe.lpush(keys.dead, "dead-1", "dead-2")
        for start in range(0, jobs_per_type, FILL_BATCH):
            ids = [f"j{n}" for n in range(start, min(start + FILL_BATCH, jobs_per_type))]
            pipe.lpush(keys.queue, *ids)
        if jobs_per_type:
            pipe.hset(keys.job("j0"), "enqueued_at", now_ms - 30_000)
        if len(pipe) > 2000:
            pipe.execute()
    pipe.execute()


def commands_processed(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    # The bench's own INFO calls are not the exporter's.
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def measure(url: str, admin: redis.Redis, scenario: str, types: int, per_type: int,
                  scrapes: int) -> Row:  # fmt: skip
    settings = ExporterSettings.from_args(
        ["--redis-url", url, "--max-agent-types", str(max(types, 200))]
    )
    client = make_exporter_client(settings)
    client.connection_pool.connection_class = CountingConnection
    exporter = Exporter(settings, client)
    try:
        for _ in range(3):  # discovery and script caching happen here
            result = await exporter.scrape()
            assert result.snapshot is not None and len(result.snapshot.types) == types
        writes_before, commands_before = CountingConnection.writes, commands_processed(admin)
        timings = []
        for _ in range(scrapes):
            started = time.perf_counter()
            result = await exporter.scrape()
            exporter.render(result, None)
            timings.append((time.perf_counter() - started) * 1000)
        writes = CountingConnection.writes - writes_before
        commands = commands_processed(admin) - commands_before
    finally:
        await exporter.aclose()
    timings.sort()
    p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
    return Row(scenario, types, types * per_type, statistics.median(timings), p99,
               writes / scrapes, commands / scrapes)  # fmt: skip


async def run(scrapes: int) -> list[Row]:
    rows = []
    with RedisServer() as server:
        admin = redis.Redis(port=server.port, decode_responses=True)
        plan = [
            ("5 types", 5, 10, scrapes),
            ("100 types", 100, 10, scrapes),
            ("1000 types", 1000, 10, max(20, scrapes // 5)),
            ("1e3 queued", 1, 1_000, scrapes),
            ("1e6 queued", 1, 1_000_000, scrapes),
        ]
        for scenario, types, per_type, count in plan:
            fill(admin, types, per_type)
            rows.append(await measure(server.url, admin, scenario, types, per_type, count))
        admin.close()
    return rows


def report(rows: list[Row]) -> bool:
    print(f"{'scenario':<12} {'types':>6} {'queued':>10} {'median ms':>10} {'p99 ms':>8} "
          f"{'round trips':>12} {'redis cmds':>10}")  # fmt: skip
    for r in rows:
        print(f"{r.scenario:<12} {r.types:>6} {r.queued:>10} {r.median_ms:>10.2f} "
              f"{r.p99_ms:>8.2f} {r.round_trips:>12.2f} {r.commands:>10.1f}")  # fmt: skip
    print("(round trips: client socket writes per scrape; redis cmds: INFO commandstats calls")
    print(" per scrape, counting the commands run inside the snapshot script: 11 per type)")
    by_name = {r.scenario: r for r in rows}
    ratio = by_name["1e6 queued"].median_ms / by_name["1e3 queued"].median_ms
    checks = [
        ("one round trip per scrape", all(r.round_trips == 1 for r in rows)),
        (f"1e6 vs 1e3 queued median ratio {ratio:.2f} <= 1.2", ratio <= 1.2),
        (f"100 types p99 {by_name['100 types'].p99_ms:.1f} ms < 50 ms",
         by_name["100 types"].p99_ms < 50),
    ]  # fmt: skip
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return all(ok for _, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200, help="timed scrapes per scenario")
    args = parser.parse_args()
    return 0 if report(asyncio.run(run(args.scrapes))) else 1


if __name__ == "__main__":
    sys.exit(main())
