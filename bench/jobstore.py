"""RedisJobStore vs the raw redis-py commands it stands for, one op at a time, one process.

    .venv/bin/python -m bench.jobstore [--ops 20000]

Starts its own redis-server. For each verb it alternates, op by op, a store call and
its raw equivalent (same server, same client), so that load from anything else on the
machine falls on both alike; it reports each side's ops/s from the mean and from the
median latency, and their ratios (a verb passes when both ratios meet the target):

    create  store.create (Lua: EXISTS + TIME + HSET + EXPIRE)  vs  HSET + EXPIRE pipelined
    update  store.update (Lua: checks + HSET + HGETALL)        vs  HSET + EXPIRE pipelined
    get     store.get (HGETALL + parse + validate)             vs  HGETALL

Targets (issue 2): get >= 0.75 of raw, create/update >= 0.5 of raw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable

from platform_common.jobs import JobStatus, RedisJobStore
from platform_common.jobs.redis.url import RedisClient, RedisSettings
from tests.support.redis_server import RedisServer

TARGETS = {"create": 0.5, "update": 0.5, "get": 0.75}
PAYLOAD = {"request": {"repo": "platform/agents", "branch": "main", "depth": 3}}


async def interleaved(
    ops: int,
    store_op: Callable[[int], Awaitable[object]],
    raw_op: Callable[[int], Awaitable[object]],
) -> tuple[list[float], list[float]]:
    """Per-op latencies of each side, alternating op by op (and which side goes first),
    so that load from anything else on the machine falls on both alike."""
    clock = time.perf_counter
    store_lat: list[float] = []
    raw_lat: list[float] = []
    for n in range(ops):
        first, second, first_lat, second_lat = (
            (store_op, raw_op, store_lat, raw_lat)
            if n % 2
            else (raw_op, store_op, raw_lat, store_lat)
        )
        t0 = clock()
        await first(n)
        t1 = clock()
        await second(n)
        t2 = clock()
        first_lat.append(t1 - t0)
        second_lat.append(t2 - t1)
    return store_lat, raw_lat


async def bench(url: str, ops: int) -> dict[str, tuple[list[float], list[float]]]:
    settings = RedisSettings.from_url(url)
    client: RedisClient = settings.make_client()
    store = RedisJobStore(settings, agent="bench", client=client)
    payload_json = json.dumps(PAYLOAD)
    raw_prefix = "raw:{bench}:"
    statuses = [JobStatus.RUNNING, JobStatus.PENDING]

    async def raw_write(key: str, mapping: dict[str, str]) -> None:
        async with client.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, 3600)
            await pipe.execute()

    created_hash = {"status": "pending", "payload": payload_json, "created_at": "1.0",
                    "updated_at": "1.0", "version": "1", "owner_oid": ""}  # fmt: skip

    async def raw_create(n: int) -> None:
        await raw_write(raw_prefix + f"{n}", created_hash)

    async def raw_update(n: int) -> None:
        await raw_write(
            raw_prefix + f"{n % 100}", {"status": "running", "updated_at": "2.0", "version": "2"}
        )

    async def raw_get(n: int) -> None:
        await client.hgetall(raw_prefix + f"{n % 100}")  # type: ignore[misc]

    await client.flushdb()
    for n in range(200):  # warm up: connection, script load
        await store.create(f"warm-{n}", PAYLOAD, ttl_seconds=60)
        await raw_create(n)
    results = {
        "create": await interleaved(
            ops, lambda n: store.create(f"s-{n}", PAYLOAD, ttl_seconds=3600), raw_create
        ),
        "update": await interleaved(
            ops, lambda n: store.update(f"s-{n % 100}", status=statuses[n % 2]), raw_update
        ),
        "get": await interleaved(ops, lambda n: store.get(f"s-{n % 100}"), raw_get),
    }
    await store.close()
    await client.aclose()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000, help="operations per verb and side")
    args = parser.parse_args()
    with RedisServer() as server:
        results = asyncio.run(bench(server.url, args.ops))
    print(f"RedisJobStore vs raw redis-py: {args.ops} ops per verb and side, one at a time,")
    print("alternating op by op against one redis-server. ops/s = 1 / latency.")
    print(f"{'verb':<8}{'store mean':>12}{'raw mean':>10}{'ratio':>7}"
          f"{'store p50':>11}{'raw p50':>9}{'ratio':>7}{'target':>8}  ok")  # fmt: skip
    failed = False
    for verb, (store_lat, raw_lat) in results.items():
        store_mean, raw_mean = 1 / statistics.fmean(store_lat), 1 / statistics.fmean(raw_lat)
        store_p50, raw_p50 = 1 / statistics.median(store_lat), 1 / statistics.median(raw_lat)
        ok = min(store_mean / raw_mean, store_p50 / raw_p50) >= TARGETS[verb]
        failed |= not ok
        print(f"{verb:<8}{store_mean:>12,.0f}{raw_mean:>10,.0f}{store_mean / raw_mean:>7.2f}"
              f"{store_p50:>11,.0f}{raw_p50:>9,.0f}{store_p50 / raw_p50:>7.2f}"
              f"{TARGETS[verb]:>8.2f}  {'yes' if ok else 'NO'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
