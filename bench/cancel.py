"""Cancel benchmark (not a test): how soon a running job's handler and a completion
subscriber learn of its cancel.

    .venv/bin/python -m bench.cancel [--cancels 1000] [--workers 2] [--concurrency 100]
        [--backlog 100000]

Starts its own redis-server and `--workers` worker processes (`python -m
platform_common.jobs worker`) whose handler (bench.handlers:waits) runs until its task is
cancelled and then writes the wall-clock time it saw the cancel. In waves of
workers x concurrency jobs: enqueue, wait until every handler runs, then cancel each
(JobQueue.cancel, one after the other, each call's start time kept) while a subscriber
(Completions, every job) notes when each job's event arrives. Prints p50/p99/max of
cancel() -> the handler saw it, and cancel() -> the subscriber's cancelled event, and
the jobs whose result was not `cancelled` (must be 0). Then, with the workers stopped,
`--backlog` jobs of other sessions waiting and 10 of one session: how long
cancel_session takes and the Redis CPU it costs (it reads every live job, no index).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis

from bench.handlers import CANCEL_SEEN_KEY, CANCEL_STARTED_KEY
from platform_common.jobs.queue import JobQueue, QueueSettings, QueueState
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer

AGENT_TYPE = "dining"
ROOT = Path(__file__).resolve().parents[1]


def _workers(url: str, count: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, QUEUE_REDIS_URL=url, PYTHONPATH=str(ROOT))
    command = [
        sys.executable, "-m", "platform_common.jobs", "worker", "--agent-type", AGENT_TYPE,
        "--handler", "bench.handlers:waits", "--concurrency", str(concurrency),
    ]  # fmt: skip
    return [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]


async def _until(probe: object, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not await probe():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("bench: the workers did not get there in time")
        await asyncio.sleep(0.01)


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   max {ordered[-1] * 1000:7.1f} ms"


async def _session_cost(url: str, backlog: int) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    async with await JobQueue.connect(QueueSettings.from_url(url)) as queue:
        await client.flushall()
        for start in range(0, backlog, 500):
            await queue.enqueue_many(
                [make_job(ttl_seconds=600) for _ in range(min(500, backlog - start))]
            )
        mine = await queue.enqueue_many(
            [make_job(session_id="leaving", ttl_seconds=600) for _ in range(10)]
        )
        before = await client.info("cpu")
        began = time.monotonic()
        reports = await queue.cancel_session("leaving")
        took = time.monotonic() - began
        after = await client.info("cpu")
    await client.aclose()
    cpu = sum(after[k] - before[k] for k in ("used_cpu_user", "used_cpu_sys"))
    assert sorted(r.job_id for r in reports) == sorted(mine)
    print(
        f"cancel_session over {backlog + 10:,} waiting jobs (10 its own): "
        f"{took * 1000:.1f} ms, Redis CPU {cpu * 1000:.1f} ms "
        f"({cpu * 1e6 / (backlog + 10):.2f} us a live job)"
    )


async def run(cancels: int, workers: int, concurrency: int, backlog: int) -> None:
    with RedisServer() as server:
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        queue = await JobQueue.connect(QueueSettings.from_url(server.url))
        processes = _workers(server.url, workers, concurrency)
        asked: dict[str, float] = {}
        heard: dict[str, float] = {}
        try:
            events = queue.completions(every_job=True)

            async def listen() -> None:
                async for completion in events:
                    heard[completion.job_id] = time.time()

            listener = asyncio.create_task(listen())
            wave = workers * concurrency
            done = 0
            while done < cancels:
                size = min(wave, cancels - done)
                ids = await queue.enqueue_many([make_job(ttl_seconds=600) for _ in range(size)])

                async def all_running(ids: list[str] = ids) -> bool:
                    running = await client.smismember(CANCEL_STARTED_KEY, ids)
                    return all(running)

                await _until(all_running)
                for job_id in ids:
                    asked[job_id] = time.time()
                    await queue.cancel(AGENT_TYPE, job_id, "bench")

                async def all_heard(ids: list[str] = ids) -> bool:
                    seen = await client.hmget(CANCEL_SEEN_KEY, ids)
                    return all(seen) and all(job_id in heard for job_id in ids)

                await _until(all_heard)
                done += size
                print(f"{done} cancels done", file=sys.stderr)
            seen = await client.hgetall(CANCEL_SEEN_KEY)
            not_cancelled = 0
            for job_id in asked:
                result = await queue.get_result(job_id, AGENT_TYPE)
                not_cancelled += result is None or result.status != QueueState.CANCELLED
            listener.cancel()
            await events.aclose()
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
            await queue.aclose()
            await client.aclose()
        await _session_cost(server.url, backlog)
    to_handler = [float(seen[j]) - asked[j] for j in asked]
    to_event = [heard[j] - asked[j] for j in asked]
    print(f"{len(asked)} cancels of running jobs, {workers} worker processes x {concurrency}")
    print(f"cancel() -> handler saw it:      {_quantiles(to_handler)}")
    print(f"cancel() -> subscriber's event:  {_quantiles(to_event)}")
    print(f"results not cancelled: {not_cancelled}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cancels", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=100_000)
    args = parser.parse_args()
    asyncio.run(run(args.cancels, args.workers, args.concurrency, args.backlog))


if __name__ == "__main__":
    main()
