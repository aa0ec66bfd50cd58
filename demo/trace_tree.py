"""`python -m demo.trace_tree`: one job's trace across the queue, printed as a tree.

Starts a private redis-server, enqueues one job inside an orchestrator's span, and runs
it in an in-process Worker whose handler fails the first attempt and succeeds the
second. The OpenTelemetry SDK (an in-memory exporter: what a service would send to its
collector) records the producer's and the worker's spans; the tree below the
orchestrator's span is what a tracing backend shows for that job: the send span, a
process span per attempt (the failed one with its exception), and a settle span under
each attempt (retry, then complete).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from platform_common.jobs.queue import JobPayload, JobQueue, QueueSettings, current_job
from platform_common.jobs.worker import Worker

from .processes import ProcessGroup, free_port
from .servers import start_redis

__all__ = ["render_tree", "traced_job"]

SHOWN_ATTRIBUTES = (
    "messaging.operation.type",
    "messaging.destination.name",
    "job.attempt",
    "job.outcome",
    "error.type",
)
"""The attributes each line shows (every span carries more: see the README's table)."""


async def flaky(payload: JobPayload) -> dict[str, str]:
    """Fails its first attempt, succeeds its second."""
    if current_job().attempt == 1:
        raise RuntimeError("kitchen closed")
    return {"table": "booked"}


class Collector(InMemorySpanExporter):
    """Keeps every span; `settled` is set once the job's last span (its completion) ends:
    the simple processor exports each span as it ends, in the worker's own loop."""

    def __init__(self) -> None:
        super().__init__()
        self.settled = asyncio.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        if any(span.name == "complete dining" for span in spans):
            self.settled.set()
        return result


async def traced_job(redis_url: str) -> list[ReadableSpan]:
    """Enqueue one job under an orchestrator's span, run it (failing once), and return
    every finished span."""
    exporter = Collector()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = QueueSettings.from_url(redis_url, backoff_base=0.05, block_timeout=0.2)
    async with await JobQueue.connect(settings, tracer_provider=provider) as queue:
        job = {
            "job_id": "trace-demo-1", "session_id": "s-1", "orchestrator_id": "orch-1",
            "agent_type": "dining", "task": "Book a table for two", "constraints": {},
            "curated_shortlist": [], "result_format": "Booking", "ttl_seconds": 600,
            "created_at": datetime.now(UTC).isoformat(),
        }  # fmt: skip
        with provider.get_tracer("orchestrator").start_as_current_span("plan trip"):
            await queue.enqueue(job)
        worker = Worker(settings, "dining", flaky, concurrency=1, tracer_provider=provider)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(exporter.settled.wait(), 30)
        finally:
            worker.stop()
            await task
    provider.shutdown()
    return list(exporter.get_finished_spans())


def render_tree(spans: Sequence[ReadableSpan]) -> str:
    """The spans as an indented tree by parent, children in start order; a span's line
    gives its name, kind, shown attributes, status and events."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    known = {span.context.span_id for span in spans if span.context is not None}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        by_parent.setdefault(parent if parent in known else None, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: s.start_time or 0):
            lines.append("  " * depth + _line(span))
            if span.context is not None:
                walk(span.context.span_id, depth + 1)

    walk(None, 0)
    trace_ids = {f"{s.context.trace_id:032x}" for s in spans if s.context is not None}
    return "\n".join([f"trace {', '.join(sorted(trace_ids))}", *lines])


def _line(span: ReadableSpan) -> str:
    attributes: dict[str, Any] = dict(span.attributes or {})
    shown = " ".join(f"{k}={attributes[k]}" for k in SHOWN_ATTRIBUTES if k in attributes)
    parts = [f"{span.name} [{span.kind.name}]", shown, f"status={span.status.status_code.name}"]
    parts += [f"event={event.name}" for event in span.events]
    if span.links:
        parts.append(f"links={len(span.links)}")
    return " ".join(part for part in parts if part)


def main(argv: Sequence[str] | None = None) -> None:
    # No options: the parser is there for --help, which describes the run, not starts it.
    argparse.ArgumentParser(
        prog="python -m demo.trace_tree",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trace-tree-") as directory:
        group = ProcessGroup(Path(directory))
        try:
            url = start_redis(group, Path(directory) / "redis", free_port())
            spans = asyncio.run(traced_job(url))
        finally:
            group.stop()
    print(render_tree(spans))


if __name__ == "__main__":
    main()
