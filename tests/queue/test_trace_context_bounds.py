"""A worker reads a stored trace context only up to MAX_TRACE_CONTEXT_LENGTH and only
if it parses as a flat object of strings: anything else (nested, oversized, not JSON) is
dropped and the job runs without it, in the same attempt. Every drop is counted
(`trace_context_dropped`) and logged (rate-limited per cause)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, Leases, Worker, current_job
from platform_common.jobs.queue.tracing import TRACE_CONTEXT_FIELD
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings
from tests.support.stored_jobs import to_job_hash

DINING = QueueKeys("dining")
TRACING = "platform_common.jobs.queue.tracing"
CONSUMER = "platform_common.jobs.queue.consumer"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider
    tracer_provider.shutdown()


def warnings_of(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name and r.levelno == logging.WARNING]


# Stored values a worker must not parse, or that do not parse: each is dropped (the job
# runs without a parent trace), logged naming the job and counted under its cause.
NESTED = "[" * 1000 + "]" * 1000
NESTED_IN_A_HEADER = '{"traceparent":' + "[" * 900 + "]" * 900 + "}"
OVERSIZED = (
    '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",'
    '"tracestate":"' + "a=b," * 1_250_000 + 'a=b"}'
)
HOSTILE = {
    "nested": (NESTED, "unparsable"),
    "nested in a header": (NESTED_IN_A_HEADER, "unparsable"),
    "oversized": (OVERSIZED, "oversized"),
    "not json": ("{not json", "unparsable"),
}


async def plant(redis_client: RedisClient, job_id: str, value: str, layout: str) -> None:
    """Replace the stored trace context with a raw write, as a worker- or operator-role
    client can: in the packed value of a waiting job, or in its job hash."""
    if layout == "packed":
        header, _, payload = (await redis_client.hget(DINING.queued, job_id)).split("\n", 2)
        await redis_client.hset(DINING.queued, job_id, f"{header}\n{value}\n{payload}")
    else:
        await to_job_hash(redis_client, DINING, job_id)
        await redis_client.hset(DINING.job(job_id), TRACE_CONTEXT_FIELD, value)


class Attempts:
    """A handler recording (job id, attempt) of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, job: JobPayload) -> dict[str, bool]:
        self.calls.append((current_job().job_id, current_job().attempt))
        return {"ok": True}


@asynccontextmanager
async def working(
    queue: JobQueue, handler: Attempts, provider: TracerProvider | None
) -> AsyncIterator[Worker]:
    worker = Worker(queue.settings, "dining", handler, concurrency=2, tracer_provider=provider)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await task


def about(caplog: pytest.LogCaptureFixture, job_id: str) -> list[str]:
    return [
        r.getMessage() for r in warnings_of(caplog, TRACING) if f"job={job_id}" in r.getMessage()
    ]


async def settled_once(queue: JobQueue, job_id: str) -> None:
    result = await eventually(lambda: queue.get_result(job_id, "dining"))
    assert result.ok and result.result == {"ok": True}


@pytest.mark.parametrize("layout", ["packed", "job hash"])
@pytest.mark.parametrize("hostile", list(HOSTILE))
async def test_a_stored_trace_context_that_does_not_parse_is_dropped_within_one_attempt(
    redis_url: str,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
    hostile: str,
    layout: str,
) -> None:
    value, cause = HOSTILE[hostile]
    caplog.set_level("WARNING", logger=TRACING)
    handler = Attempts()
    async with await JobQueue.connect(fast_settings(redis_url)) as queue:
        job = make_job()
        await queue.enqueue(job)
        await plant(redis_client, job["job_id"], value, layout)
        async with working(queue, handler, provider) as worker:
            await settled_once(queue, job["job_id"])
            dropped = worker.trace_context_dropped
    assert handler.calls == [(job["job_id"], 1)]
    assert dropped == {cause: 1}
    (line,) = about(caplog, job["job_id"])
    assert "agent_type=dining" in line and "runs without it" in line
    (process,) = [s for s in exporter.get_finished_spans() if s.name == "process dining"]
    assert process.parent is None and list(process.links) == []


async def test_without_an_sdk_a_nested_trace_context_is_dropped_when_a_line_reads_it(
    redis_url: str, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker without an SDK parses the stored context only when a log line asks for
    its ids (here the DEBUG `started` line): that parse is bounded too."""
    caplog.set_level("WARNING", logger=TRACING)
    caplog.set_level("DEBUG", logger=CONSUMER)
    handler = Attempts()
    async with await JobQueue.connect(fast_settings(redis_url)) as queue:
        job = make_job()
        await queue.enqueue(job)
        await plant(redis_client, job["job_id"], NESTED, "packed")
        async with working(queue, handler, None) as worker:
            await settled_once(queue, job["job_id"])
            dropped = worker.trace_context_dropped
    assert handler.calls == [(job["job_id"], 1)]
    assert dropped == {"unparsable": 1}
    assert len(about(caplog, job["job_id"])) == 1
    started = [
        r for r in caplog.records if r.getMessage().startswith(f"started job={job['job_id']}")
    ]
    assert [getattr(r, "trace_id", None) for r in started] == [None]


async def test_the_reaper_survives_a_nested_trace_context_and_retries_the_job(
    redis_url: str,
    redis_client: RedisClient,
    provider: TracerProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reaper's line about a lapsed lease reads the job's trace context for its ids:
    a nested one is dropped there too, and the reaper goes on (the job is retried)."""
    caplog.set_level("WARNING", logger=TRACING)
    handler = Attempts()
    async with await JobQueue.connect(fast_settings(redis_url)) as queue:
        job = make_job()
        await queue.enqueue(job)
        await plant(redis_client, job["job_id"], NESTED, "packed")
        # Taken and claimed by a worker that then died: its lease has lapsed.
        assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
        leases = Leases(queue.connection, "dining")
        _, claims = await leases.claim("gone-worker", [(job["job_id"], "t-1")])
        assert [claim.job_id for claim in claims] == [job["job_id"]]
        await redis_client.zadd(DINING.leases, {job["job_id"]: 0})
        async with working(queue, handler, provider) as worker:
            await settled_once(queue, job["job_id"])
            dropped = worker.trace_context_dropped
    assert handler.calls == [(job["job_id"], 2)]
    # Read twice, dropped twice: by the reaper's line, by the second attempt.
    assert dropped == {"unparsable": 2}
    assert len(about(caplog, job["job_id"])) == 2
