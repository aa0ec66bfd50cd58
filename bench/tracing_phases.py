"""The phases bench.tracing times (enqueue, enqueue_many, drain), written once for both
sides of the comparison: this package, imported by bench.tracing, and the package as of
an older revision, for which bench.tracing_old copies this file next to that revision's
tree and runs it as a child process (`python -P -m tracing_phases`). So it imports only
the standard library, redis and platform_common.jobs.queue (nothing else of this repo),
and calls only what the older revision has too.

Child protocol: one JSON request per stdin line ({"url", "single", "many", "agent_type",
"concurrency"}), one JSON line of jobs/s per phase back; the first line printed is
{"package": <directory of the platform_common.jobs.queue it imported>}, so the parent
can check which tree it measures.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis

import platform_common.jobs.queue
from platform_common.jobs.queue import JobQueue, QueueSettings, Worker

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

PHASES = ("enqueue", "enqueue_many", "drain")


def _kwargs(provider: TracerProvider | None) -> dict[str, Any]:
    # Tracing off passes nothing, so the same calls run against an older tree too.
    return {} if provider is None else {"tracer_provider": provider}


async def _enqueue(url: str, jobs: list[dict[str, Any]], provider: TracerProvider | None) -> float:
    queue = await JobQueue.connect(QueueSettings.from_url(url), **_kwargs(provider))
    try:
        start = time.perf_counter()
        for job in jobs:
            await queue.enqueue(job)
        return time.perf_counter() - start
    finally:
        await queue.aclose()


async def _enqueue_many(
    url: str, jobs: list[dict[str, Any]], provider: TracerProvider | None
) -> float:
    queue = await JobQueue.connect(QueueSettings.from_url(url), **_kwargs(provider))
    try:
        start = time.perf_counter()
        await queue.enqueue_many(jobs)
        return time.perf_counter() - start
    finally:
        await queue.aclose()


async def _drain(
    url: str, n: int, agent_type: str, concurrency: int, provider: TracerProvider | None
) -> float:
    """Seconds for one in-process worker (no-op handler) to complete the n jobs already
    queued, from its ready event to the last completion."""
    settings = QueueSettings.from_url(url)
    worker = Worker(
        settings, agent_type, lambda job: None, concurrency=concurrency, **_kwargs(provider)
    )
    client = aioredis.Redis.from_url(url, decode_responses=True)
    stats = f"jobs:{{{agent_type}}}:stats"
    task = asyncio.create_task(worker.run())
    try:
        await worker.ready.wait()
        start = time.perf_counter()
        while int(await client.hget(stats, "completed") or 0) < n:  # type: ignore[misc]
            if task.done():
                task.result()
                raise RuntimeError("the worker stopped before draining the queue")
            await asyncio.sleep(0.005)
        return time.perf_counter() - start
    finally:
        worker.stop()
        await task
        await client.aclose()


def _flush(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def measure(
    url: str,
    single: list[dict[str, Any]],
    many: list[dict[str, Any]],
    agent_type: str,
    concurrency: int,
    provider: TracerProvider | None = None,
) -> dict[str, float]:
    """jobs/s of each phase: `single` enqueued one by one, `many` in one enqueue_many, then
    drained; with `provider` (None: tracing off, or a revision that has no tracing)."""
    if len(single) != len(many) or not single:
        raise ValueError(f"single and many must be equal, non-empty: {len(single)}, {len(many)}")
    n = len(many)
    _flush(url)
    enqueue = asyncio.run(_enqueue(url, single, provider))
    _flush(url)
    enqueue_many = asyncio.run(_enqueue_many(url, many, provider))
    drain = asyncio.run(_drain(url, n, agent_type, concurrency, provider))
    _flush(url)
    return {"enqueue": n / enqueue, "enqueue_many": n / enqueue_many, "drain": n / drain}


def serve() -> None:
    """The child's loop: measure each request from stdin, answer on stdout, until EOF."""
    # platform_common is a namespace package (its __path__ spans every tree on sys.path):
    # the queue package's own file says which tree the code came from.
    queue_file = platform_common.jobs.queue.__file__ or ""
    print(json.dumps({"package": os.path.dirname(queue_file)}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        rates = measure(
            request["url"],
            request["single"],
            request["many"],
            request["agent_type"],
            request["concurrency"],
        )
        print(json.dumps(rates), flush=True)


if __name__ == "__main__":
    serve()
