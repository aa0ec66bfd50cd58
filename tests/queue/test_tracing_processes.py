"""One trace across processes: this process enqueues with the SDK's in-memory exporter,
a worker CLI process (tests.support.otel_file_worker) writes its spans to a file, and
the worker's spans sit under the producer's trace id and send span."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from platform_common.jobs.queue import JobQueue
from tests.support.otel_file_worker import SPANS_FILE_ENV
from tests.support.queue_handlers import behaviour, make_job
from tests.support.queue_runtime import eventually, fast_settings
from tests.support.workers import FAST_SETTINGS, WorkerGroup


@pytest.fixture
def spans_file(tmp_path: Path) -> Path:
    return tmp_path / "worker-spans.jsonl"


@pytest.fixture
def traced_workers(redis_url: str, spans_file: Path) -> Iterator[WorkerGroup]:
    with WorkerGroup(
        redis_url, "dining", "tests.support.queue_handlers:behave",
        env={**FAST_SETTINGS, SPANS_FILE_ENV: str(spans_file)},
        module="tests.support.otel_file_worker",
    ) as workers:  # fmt: skip
        yield workers


def worker_spans(spans_file: Path, job_id: str) -> list[dict[str, Any]]:
    """The worker's finished spans about `job_id`, in the order they ended."""
    if not spans_file.exists():
        return []
    lines = spans_file.read_text(encoding="utf-8").splitlines()
    spans = [json.loads(line) for line in lines if line.endswith("}")]  # skip a partial line
    return [s for s in spans if s["attributes"].get("messaging.message.id") == job_id]


async def test_the_worker_process_spans_join_the_producers_trace(
    redis_url: str, spans_file: Path, traced_workers: WorkerGroup
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    job = make_job(constraints=behaviour("fail_until", succeed_on=2))
    queue = await JobQueue.connect(fast_settings(redis_url), tracer_provider=provider)
    try:
        await queue.enqueue(job)
    finally:
        await queue.aclose()
        provider.shutdown()
    (send,) = [span for span in exporter.get_finished_spans() if span.name == "send dining"]
    assert send.context is not None
    trace_id, send_id = f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}"
    traced_workers.start(concurrency=1)

    async def settled() -> list[dict[str, Any]] | None:
        # A process span ends after the complete span inside it: both must be written.
        spans = worker_spans(spans_file, job["job_id"])
        names = [s["name"] for s in spans]
        return spans if "complete dining" in names and names.count("process dining") == 2 else None

    spans = await eventually(settled, within=30)
    by_name = {name: [s for s in spans if s["name"] == name] for name in {s["name"] for s in spans}}
    first, second = by_name["process dining"]
    (retry,) = by_name["retry dining"]
    (complete,) = by_name["complete dining"]
    assert {s["trace_id"] for s in spans} == {trace_id}
    for number, process in enumerate((first, second), start=1):
        assert process["kind"] == "CONSUMER"
        assert process["parent_span_id"] == send_id
        assert process["attributes"]["job.attempt"] == number
    assert first["attributes"]["job.outcome"] == "retrying"
    assert second["attributes"]["job.outcome"] == "succeeded"
    assert retry["parent_span_id"] == first["span_id"]
    assert complete["parent_span_id"] == second["span_id"]
