"""Exemplars from metric to trace: the exporter's OpenMetrics page carries, on a duration
bucket's line, the trace id of a recent job in that bucket (the stats hash's
`<histogram>_ex:<bound>` field), and a real Prometheus with exemplar storage on keeps it:
`query_exemplars` returns the trace the worker's own spans used.

The field is written by queue_complete.lua when a real traced worker completes a real job
enqueued with tracing on: nothing here writes it."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from platform_common.jobs.keys import QueueKeys, histogram_bucket_field, histogram_exemplar_field
from platform_common.jobs.metric_catalogue import by_key
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs.worker import Worker
from tests.support.exporter_process import ExporterProcess
from tests.support.prometheus import PrometheusServer
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings

DINING = QueueKeys("dining")
OPENMETRICS = "application/openmetrics-text;version=1.0.0"


async def _succeed(job: JobPayload) -> dict[str, str]:
    return {"ok": job.job_id}


async def _run_one_traced_job(redis_url: str) -> tuple[str, str]:
    """Enqueue one job with tracing on, let a traced worker complete it; the job's id and
    the trace id (hex) of the worker's `process` span."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    settings = fast_settings(redis_url)
    try:
        async with await JobQueue.connect(settings, tracer_provider=provider) as queue:
            job_id = await queue.enqueue(make_job())
            worker = Worker(settings, "dining", _succeed, concurrency=1, tracer_provider=provider)
            task = asyncio.create_task(worker.run())

            async def completed() -> bool:
                return (await queue.stats("dining")).counters["completed"] == 1

            await eventually(completed)
            worker.stop()
            await task
    finally:
        provider.shutdown()
    [process] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    assert process.context is not None
    return job_id, format(process.context.trace_id, "032x")


def _exemplar_written(admin: redis.Redis, job_id: str, trace_id: str, bounds: list[float]) -> float:
    """The latency bucket the job was counted in, after checking that the completion
    left the job's exemplar beside it (keys.EXEMPLAR_FIELD_FORMAT), and beside its wait
    and run buckets too. Returns the latency bucket's bound."""
    stats: dict[str, str] = admin.hgetall(DINING.stats)  # type: ignore[assignment]
    finished_at = admin.hget(DINING.job(job_id), "finished_at")
    for histogram in ("latency", "wait", "run"):
        [bound] = [b for b in bounds if stats.get(histogram_bucket_field(histogram, b)) == "1"]
        written = {k: v for k, v in stats.items() if k.startswith(f"{histogram}_ex:")}
        [value] = written.values()
        assert list(written) == [histogram_exemplar_field(histogram, bound)]
        traced, seconds, millis = value.split(" ")
        assert traced == trace_id
        assert float(seconds) == pytest.approx(float(stats[f"{histogram}_sum"]), abs=1e-3)
        assert millis == finished_at  # when: the completion's time, in ms
    [latency] = [b for b in bounds if stats.get(histogram_bucket_field("latency", b)) == "1"]
    return latency


def test_a_bucket_leads_to_the_trace_of_a_real_job(
    redis_url: str, exporter_process: ExporterProcess
) -> None:
    job_id, trace_id = asyncio.run(_run_one_traced_job(redis_url))
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        bounds = [*fast_settings(redis_url).latency_buckets, float("inf")]
        bound = _exemplar_written(admin, job_id, trace_id, bounds)
    finally:
        admin.close()

    # Served on the OpenMetrics page, on that bucket's line; never on the text page.
    page = httpx.get(f"{exporter_process.url}/metrics", headers={"Accept": OPENMETRICS}).text
    le = "+Inf" if bound == float("inf") else repr(bound)
    bucket = by_key("latency").full_name() + "_bucket"
    start_of_line = f'{bucket}{{agent_type="dining",le="{le}"}}'
    [line] = [x for x in page.splitlines() if x.startswith(start_of_line)]
    assert f'# {{trace_id="{trace_id}"}}' in line
    assert "trace_id" not in httpx.get(f"{exporter_process.url}/metrics").text

    # A Prometheus with exemplar storage scrapes it (it asks for OpenMetrics) and keeps it.
    address = exporter_process.url.removeprefix("http://")
    with PrometheusServer(targets=[address], features=["exemplar-storage"]) as prometheus:
        start = time.time() - 60

        def stored() -> list[str]:
            selector = f'{bucket}{{agent_type="dining"}}'
            found = prometheus.exemplars(selector, start, time.time() + 60)
            return [e["labels"].get("trace_id") for s in found for e in s["exemplars"]]

        deadline = time.monotonic() + 30
        while not stored() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stored() == [trace_id]
