"""Queue throughput benchmark (not a test): ours vs raw redis-py on the same server.

    .venv/bin/python -m bench.queue_throughput [--jobs 20000] [--concurrency 32]
        [--aof everysec|always] [--redis-url redis://host:6379/15]

Starts its own redis-server (no persistence unless --aof says; --aof always shows what
fsync per write costs on this disk), or uses --redis-url, whose database must be empty
(it is flushed between phases, with FLUSHDB). Then for N no-op jobs with a ~300-byte
payload measures: enqueue one by one, enqueue_many, and the drain by ONE worker
process (python -m platform_common.jobs.worker, --concurrency as given) with leases,
fencing and counters on; and, as the reference, raw redis-py LPUSH one by one and
BRPOP one by one (asyncio client, like ours; the sync client's numbers are shown too).
bench/peers/ imports run_ours() and run_raw() from here (`from bench.queue_throughput
import run_ours`, with the project root on sys.path).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent

AGENT_TYPE = "dining"
NOOP_HANDLER = "platform_common.jobs.queue.builtin:noop"


def make_jobs(n: int) -> list[dict[str, Any]]:
    """N payloads of about 300 bytes each (encoded)."""
    created = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return [
        {
            "job_id": str(uuid.uuid4()),
            "session_id": "5f0c6a4e-bench-session",
            "orchestrator_id": "orch-bench",
            "agent_type": AGENT_TYPE,
            "task": "Find 3 dinner reservations in Tokyo for Feb 13-17, party of 2",
            "constraints": {"cuisines": ["sushi", "kaiseki"], "max_price_per_person": 200},
            "curated_shortlist": ["sukiyabashi-jiro", "den", "kyubey"],
            "result_format": "RestaurantOption[]",
            "created_at": created,
            "ttl_seconds": 3600,
        }
        for _ in range(n)
    ]


def _flush(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()


async def _enqueue_one_by_one(redis_url: str, jobs: list[dict[str, Any]]) -> float:
    queue = await JobQueue.connect(QueueSettings.from_url(redis_url))
    try:
        start = time.perf_counter()
        for job in jobs:
            await queue.enqueue(job)
        return time.perf_counter() - start
    finally:
        await queue.aclose()


async def _enqueue_many(redis_url: str, jobs: list[dict[str, Any]]) -> float:
    queue = await JobQueue.connect(QueueSettings.from_url(redis_url))
    try:
        start = time.perf_counter()
        await queue.enqueue_many(jobs)
        return time.perf_counter() - start
    finally:
        await queue.aclose()


def drain_with_worker(redis_url: str, n: int, concurrency: int) -> float:
    """Seconds for one worker process to complete the n jobs already queued (from its
    'ready' log line, so interpreter start-up is not counted)."""
    env = dict(os.environ, QUEUE_REDIS_URL=redis_url, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "platform_common.jobs.worker", "--agent-type", AGENT_TYPE,
         "--handler", NOOP_HANDLER, "--concurrency", str(concurrency)],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ready = threading.Event()

    def watch() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            if "worker ready" in line:
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stats_key = f"jobs:{{{AGENT_TYPE}}}:stats"
    try:
        if not ready.wait(60):
            raise RuntimeError("worker did not start")
        start = time.perf_counter()
        deadline = start + 600
        while int(client.hget(stats_key, "completed") or 0) < n:  # type: ignore[arg-type]
            if time.perf_counter() > deadline or process.poll() is not None:
                raise RuntimeError("worker did not drain the queue")
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        process.terminate()
        process.wait(30)
        client.close()


def run_ours(redis_url: str, n: int, concurrency: int = 32) -> dict[str, float]:
    """jobs/s of our enqueue, enqueue_many and one worker process's drain."""
    jobs = make_jobs(n)
    _flush(redis_url)
    single = asyncio.run(_enqueue_one_by_one(redis_url, jobs))
    _flush(redis_url)
    many = asyncio.run(_enqueue_many(redis_url, jobs))
    drain = drain_with_worker(redis_url, n, concurrency)
    _flush(redis_url)
    return {
        "enqueue_per_s": n / single,
        "enqueue_many_per_s": n / many,
        "drain_per_s": n / drain,
        "concurrency": float(concurrency),
    }


async def _raw_async(redis_url: str, payloads: list[str]) -> tuple[float, float]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        start = time.perf_counter()
        for payload in payloads:
            await client.lpush("raw:queue", payload)  # type: ignore[misc]
        lpush = time.perf_counter() - start
        start = time.perf_counter()
        for _ in payloads:
            await client.brpop(["raw:queue"], timeout=1)  # type: ignore[misc]
        brpop = time.perf_counter() - start
        return lpush, brpop
    finally:
        await client.aclose()


def _raw_sync(redis_url: str, payloads: list[str]) -> tuple[float, float]:
    client = redis.Redis.from_url(redis_url)
    try:
        start = time.perf_counter()
        for payload in payloads:
            client.lpush("raw:queue", payload)
        lpush = time.perf_counter() - start
        start = time.perf_counter()
        for _ in payloads:
            client.brpop(["raw:queue"], timeout=1)
        brpop = time.perf_counter() - start
        return lpush, brpop
    finally:
        client.close()


async def _interleaved(
    redis_url: str, jobs: list[dict[str, Any]], block: int
) -> tuple[float, float]:
    import json

    queue = await JobQueue.connect(QueueSettings.from_url(redis_url))
    client = aioredis.Redis.from_url(redis_url)
    ours = raw = 0.0
    try:
        for start in range(0, len(jobs), block):
            chunk = jobs[start : start + block]
            payloads = [json.dumps(job) for job in chunk]
            began = time.perf_counter()
            for payload in payloads:
                await client.lpush("raw:queue", payload)  # type: ignore[misc]
            raw += time.perf_counter() - began
            began = time.perf_counter()
            for job in chunk:
                await queue.enqueue(job)
            ours += time.perf_counter() - began
    finally:
        await queue.aclose()
        await client.aclose()
    return ours, raw


def compare_enqueue(redis_url: str, n: int, block: int = 500) -> dict[str, float]:
    """Our enqueue and raw async LPUSH, one by one, measured in alternating blocks so
    that load from other processes on the machine hits both alike."""
    _flush(redis_url)
    ours, raw = asyncio.run(_interleaved(redis_url, make_jobs(n), block))
    _flush(redis_url)
    return {"enqueue_per_s": n / ours, "lpush_per_s": n / raw, "ratio": raw / ours}


def run_raw(redis_url: str, n: int) -> dict[str, float]:
    """jobs/s of raw redis-py LPUSH one by one and BRPOP one by one (async and sync)."""
    import json

    payloads = [json.dumps(job) for job in make_jobs(n)]
    _flush(redis_url)
    lpush, brpop = asyncio.run(_raw_async(redis_url, payloads))
    sync_lpush, sync_brpop = _raw_sync(redis_url, payloads)
    _flush(redis_url)
    return {
        "lpush_per_s": n / lpush,
        "brpop_per_s": n / brpop,
        "sync_lpush_per_s": n / sync_lpush,
        "sync_brpop_per_s": n / sync_brpop,
    }


async def _brpop_drain(redis_url: str, payloads: list[str]) -> float:
    """Seconds for raw async BRPOP one by one to empty a list of `payloads`."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        for start in range(0, len(payloads), 1000):
            await client.lpush("raw:queue", *payloads[start : start + 1000])  # type: ignore[misc]
        began = time.perf_counter()
        for _ in payloads:
            await client.brpop(["raw:queue"], timeout=1)  # type: ignore[misc]
        return time.perf_counter() - began
    finally:
        await client.aclose()


def compare_drain(redis_url: str, n: int, concurrency: int, rounds: int = 3) -> dict[str, float]:
    """One worker process's drain and raw BRPOP, alternated `rounds` times on the same
    server so that the host's drifting load hits both alike; the median round's ratio."""
    import json

    ratios, ours_rates, raw_rates = [], [], []
    for _ in range(rounds):
        jobs = make_jobs(n)
        _flush(redis_url)
        raw = asyncio.run(_brpop_drain(redis_url, [json.dumps(job) for job in jobs]))
        _flush(redis_url)
        asyncio.run(_enqueue_many(redis_url, jobs))
        ours = drain_with_worker(redis_url, n, concurrency)
        _flush(redis_url)
        ratios.append(raw / ours)
        ours_rates.append(n / ours)
        raw_rates.append(n / raw)
    middle = sorted(range(rounds), key=ratios.__getitem__)[rounds // 2]
    return {"drain_per_s": ours_rates[middle], "brpop_per_s": raw_rates[middle],
            "ratio": ratios[middle]}  # fmt: skip


def _measure(
    url: str, n: int, concurrency: int
) -> tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, float]]:
    return (
        run_raw(url, n),
        run_ours(url, n, concurrency),
        compare_enqueue(url, n),
        compare_drain(url, n, concurrency),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--aof",
        choices=("no", "everysec", "always"),
        default="no",
        help="persistence of the redis-server started here",
    )
    parser.add_argument("--redis-url", help="an existing Redis; its database must be empty")
    args = parser.parse_args()
    if args.redis_url:
        client = redis.Redis.from_url(args.redis_url)
        keys = client.dbsize()
        client.close()
        if keys:
            parser.error(
                f"the database of --redis-url holds {keys} keys; the bench flushes "
                "it between phases, so it wants an empty one"
            )
        raw, ours, paired, drained = _measure(args.redis_url, args.jobs, args.concurrency)
        where = "the given Redis"
    else:
        server = RedisServer(
            appendonly=args.aof != "no", appendfsync=args.aof if args.aof != "no" else "everysec"
        )
        with server:
            raw, ours, paired, drained = _measure(server.url, args.jobs, args.concurrency)
        where = f"one redis-server (AOF {args.aof})"
    n = args.jobs
    rows = [
        ("enqueue, one by one", ours["enqueue_per_s"], raw["lpush_per_s"], "raw LPUSH (async)"),
        ("enqueue, one by one, interleaved with LPUSH", paired["enqueue_per_s"],
         paired["lpush_per_s"], "raw LPUSH, same blocks"),
        ("enqueue_many", ours["enqueue_many_per_s"], raw["lpush_per_s"], "raw LPUSH (async)"),
        (f"drain, 1 worker process, concurrency {args.concurrency}", ours["drain_per_s"],
         raw["brpop_per_s"], "raw BRPOP (async)"),
        ("drain, alternated with BRPOP (median of 3)", drained["drain_per_s"],
         drained["brpop_per_s"], "raw BRPOP, same rounds"),
    ]  # fmt: skip
    print(f"N = {n} no-op jobs, ~300-byte payload, {where}, {os.cpu_count()} cores")
    print(f"{'operation':<44} {'ours jobs/s':>12} {'reference':>12}  ratio  reference is")
    for name, value, reference, label in rows:
        print(f"{name:<44} {value:>12,.0f} {reference:>12,.0f}  {value / reference:5.2f}  {label}")
    print(
        f"raw sync redis-py for comparison: LPUSH {raw['sync_lpush_per_s']:,.0f}/s, "
        f"BRPOP {raw['sync_brpop_per_s']:,.0f}/s; enqueue vs sync LPUSH "
        f"{ours['enqueue_per_s'] / raw['sync_lpush_per_s']:.2f}"
    )
    # The interleaved ratio is the one judged: on a shared machine the host's load
    # drifts over seconds, and alternating blocks of 500 puts both sides under it alike
    # (the one-by-one row, measured minutes apart from its reference, swings +-30%).
    # Likewise the drain: the alternated rounds' median ratio is the one judged.
    checks = [
        ("drain >= 3,000 jobs/s", ours["drain_per_s"] >= 3_000),
        ("drain >= 0.9 x raw BRPOP (alternated)", drained["ratio"] >= 0.9),
        ("enqueue >= 0.8 x raw LPUSH (interleaved)", paired["ratio"] >= 0.8),
        ("enqueue_many >= 30,000 jobs/s", ours["enqueue_many_per_s"] >= 30_000),
    ]
    print("targets: " + "; ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in checks))


if __name__ == "__main__":
    main()
