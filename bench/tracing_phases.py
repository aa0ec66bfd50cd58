"""The child side of bench.tracing: the phases it times (enqueue one by one, enqueue_many,
drain), written once for every side. bench.tracing_child runs this module as a child
process per side: for this checkout as `python -P -m bench.tracing_phases` from the
repository root, for an older revision as a copy of this file next to that revision's
archived tree (`python -P -m tracing_phases`). So it imports only the standard library,
redis and platform_common.jobs.queue (nothing else of this repo), and calls only what the
older revision has too; the OpenTelemetry SDK is imported only by a traced child
(`--traced`), which the older tree's child never is.

Protocol: the first line printed is {"package": <directory of the platform_common.jobs.queue
it imported>}, so the parent can check which tree it measures. Then one JSON request per
stdin line, one JSON answer line each, until EOF:

- {"op": "enqueue", "url", "jobs"}: the jobs enqueued one by one on this child's one
  queue connection, kept open across requests (the server is not flushed: every side's
  blocks go to the same queue); answers {"seconds"}.
- {"op": "round", "url", "many", "agent_type", "concurrency"}: the server flushed, `many`
  enqueued in one enqueue_many, then drained by one in-process Worker (no-op handler)
  from its ready event to the last completion, the server flushed again; answers the
  jobs/s of "enqueue_many" and "drain".
- {"op": "spans"}: the number of spans exported so far (0 untraced), after a flush.

A traced child passes an SDK TracerProvider (BatchSpanProcessor, an exporter that drops
every span) to the queue and the worker, and flushes it after each measurement, outside
the timing: spans still queued would otherwise be exported while another side measures.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis

import platform_common.jobs.queue
from platform_common.jobs.queue import JobQueue, QueueSettings

try:
    from platform_common.jobs.worker import Worker
except ImportError:  # the archived tree the bench compares against keeps it in the queue
    from platform_common.jobs.queue import Worker  # type: ignore[attr-defined, no-redef, unused-ignore]

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

PHASES = ("enqueue", "enqueue_many", "drain")
ROUND_PHASES = ("enqueue_many", "drain")
"""The phases measured in rounds; enqueue is measured in blocks."""


class Tracing:
    """The traced child's SDK: a TracerProvider whose BatchSpanProcessor hands every span
    to an exporter that keeps none (what an SDK costs without an exporter's I/O)."""

    def __init__(self) -> None:
        # Imported here: only a traced child needs the SDK, the old tree's child never does.
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.exported = 0
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(_dropping_exporter(self)))

    def flush(self) -> int:
        """Export every span queued so far; the number exported since the start."""
        self.provider.force_flush()
        return self.exported

    def shutdown(self) -> None:
        self.provider.shutdown()


def _dropping_exporter(tracing: Tracing) -> SpanExporter:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class DroppingExporter(SpanExporter):
        """Takes every span and keeps none, counting them on `tracing`."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            tracing.exported += len(spans)
            return SpanExportResult.SUCCESS

    return DroppingExporter()


def _kwargs(tracing: Tracing | None) -> dict[str, Any]:
    # Tracing off passes nothing, so the same calls run against an older tree too.
    return {} if tracing is None else {"tracer_provider": tracing.provider}


async def _enqueue_many(url: str, jobs: list[dict[str, Any]], tracing: Tracing | None) -> float:
    queue = await JobQueue.connect(QueueSettings.from_url(url), **_kwargs(tracing))
    try:
        start = time.perf_counter()
        await queue.enqueue_many(jobs)
        return time.perf_counter() - start
    finally:
        await queue.aclose()


async def _drain(
    url: str, n: int, agent_type: str, concurrency: int, tracing: Tracing | None
) -> float:
    """Seconds for one in-process worker (no-op handler) to complete the n jobs already
    queued, from its ready event to the last completion."""
    settings = QueueSettings.from_url(url)
    worker = Worker(
        settings, agent_type, lambda job: None, concurrency=concurrency, **_kwargs(tracing)
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


def flush(url: str) -> None:
    """Empty the server's database."""
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


class Phases:
    """One side's measurements, on one event loop for the child's life: the enqueue
    blocks share one open queue connection, so each block times enqueues only, warm."""

    def __init__(self, tracing: Tracing | None = None) -> None:
        self.tracing = tracing
        self._runner = asyncio.Runner()
        self._queue: JobQueue | None = None
        self._queue_url = ""

    def enqueue_block(self, url: str, jobs: list[dict[str, Any]]) -> float:
        """Seconds to enqueue `jobs` one by one."""
        queue = self._connected(url)

        async def block() -> float:
            start = time.perf_counter()
            for job in jobs:
                await queue.enqueue(job)
            return time.perf_counter() - start

        return self._timed(block)

    def round(
        self, url: str, many: list[dict[str, Any]], agent_type: str, concurrency: int
    ) -> dict[str, float]:
        """jobs/s of enqueue_many and of the drain of those jobs, on a flushed server."""
        if not many:
            raise ValueError("a round needs jobs")
        n = len(many)
        flush(url)
        enqueue_many = self._timed(lambda: _enqueue_many(url, many, self.tracing))
        drain = self._timed(lambda: _drain(url, n, agent_type, concurrency, self.tracing))
        flush(url)
        return {"enqueue_many": n / enqueue_many, "drain": n / drain}

    def spans(self) -> int:
        """Spans exported so far (0 untraced)."""
        return 0 if self.tracing is None else self.tracing.flush()

    def close(self) -> None:
        if self._queue is not None:
            self._runner.run(self._queue.aclose())
            self._queue = None
        self._runner.close()
        if self.tracing is not None:
            self.tracing.shutdown()

    def _connected(self, url: str) -> JobQueue:
        if self._queue is None or self._queue_url != url:
            if self._queue is not None:
                self._runner.run(self._queue.aclose())
            settings = QueueSettings.from_url(url)
            self._queue = self._runner.run(JobQueue.connect(settings, **_kwargs(self.tracing)))
            self._queue_url = url
        return self._queue

    def _timed(self, measurement: Callable[[], Coroutine[Any, Any, float]]) -> float:
        """Run `measurement` (its seconds) after a GC, so no side pays for garbage left
        before it; then flush queued spans, untimed."""
        gc.collect()
        seconds = self._runner.run(measurement())
        if self.tracing is not None:
            self.tracing.flush()
        return seconds


def answer(phases: Phases, request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request of the protocol above."""
    op = request["op"]
    if op == "enqueue":
        return {"seconds": phases.enqueue_block(request["url"], request["jobs"])}
    if op == "round":
        return phases.round(
            request["url"], request["many"], request["agent_type"], request["concurrency"]
        )
    if op == "spans":
        return {"spans": phases.spans()}
    raise ValueError(f"unknown request {op!r}")


def serve(traced: bool) -> None:
    """The child's loop: answer each request from stdin on stdout, until EOF."""
    # platform_common is a namespace package (its __path__ spans every tree on sys.path):
    # the queue package's own file says which tree the code came from.
    queue_file = platform_common.jobs.queue.__file__ or ""
    print(json.dumps({"package": os.path.dirname(queue_file)}), flush=True)
    phases = Phases(Tracing() if traced else None)
    try:
        for line in sys.stdin:
            print(json.dumps(answer(phases, json.loads(line))), flush=True)
    finally:
        phases.close()


if __name__ == "__main__":
    serve(traced="--traced" in sys.argv[1:])
