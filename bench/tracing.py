"""What tracing costs the queue (not a test): enqueue, enqueue_many and drain, with tracing
off (no SDK: OpenTelemetry's global no-op provider) and on (an SDK TracerProvider with a
BatchSpanProcessor and an exporter that drops every span), side by side.

    .venv/bin/python -m bench.tracing [--jobs 5000] [--rounds 5] [--concurrency 32]

Starts its own redis-server. Each round measures off, then on, then off again in the
same process (the host's load drifts over seconds; alternating puts both sides under
it alike); the table shows the median of the rounds. The drain is one in-process
Worker (no-op handler) taking N queued jobs, from its ready event to the last completion.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench.queue_throughput import AGENT_TYPE, make_jobs
from platform_common.jobs.queue import JobQueue, QueueSettings, Worker
from tests.support.redis_server import RedisServer

PHASES = ("enqueue", "enqueue_many", "drain")


class DroppingExporter(SpanExporter):
    """Takes every span and keeps none: what an SDK costs without an exporter's I/O."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


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


async def _drain(url: str, n: int, concurrency: int, provider: TracerProvider | None) -> float:
    """Seconds for one in-process worker to complete the n jobs already queued."""
    settings = QueueSettings.from_url(url)
    worker = Worker(
        settings, AGENT_TYPE, lambda job: None, concurrency=concurrency, **_kwargs(provider)
    )
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    stats = f"jobs:{{{AGENT_TYPE}}}:stats"
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
    client.flushdb()
    client.close()


def measure(
    url: str, n: int, concurrency: int, provider: TracerProvider | None
) -> dict[str, float]:
    """jobs/s of each phase with `provider` (None: tracing off)."""
    _flush(url)
    single = asyncio.run(_enqueue(url, make_jobs(n), provider))
    _flush(url)
    many = asyncio.run(_enqueue_many(url, make_jobs(n), provider))
    drain = asyncio.run(_drain(url, n, concurrency, provider))
    _flush(url)
    return {"enqueue": n / single, "enqueue_many": n / many, "drain": n / drain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    exporter = DroppingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    off: dict[str, list[float]] = {phase: [] for phase in PHASES}
    on: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with RedisServer() as server:
        measure(server.url, min(args.jobs, 1_000), args.concurrency, None)  # warm up
        for _ in range(args.rounds):
            for side, chosen in ((off, None), (on, provider), (off, None)):
                for phase, rate in measure(server.url, args.jobs, args.concurrency, chosen).items():
                    side[phase].append(rate)
    provider.shutdown()
    print(
        f"N = {args.jobs} no-op jobs, ~300-byte payload, one redis-server, in-process "
        f"worker (concurrency {args.concurrency}), median of {args.rounds} rounds "
        f"(off, on, off), {os.cpu_count()} cores; {exporter.spans:,} spans exported"
    )
    print(f"{'operation':<14} {'off jobs/s':>12} {'on jobs/s':>12}  on/off")
    for phase in PHASES:
        rate_off, rate_on = statistics.median(off[phase]), statistics.median(on[phase])
        print(f"{phase:<14} {rate_off:>12,.0f} {rate_on:>12,.0f}  {rate_on / rate_off:6.2f}")


if __name__ == "__main__":
    main()
