"""The trace context a job carries is bounded on both sides. A producer stores at most
W3C's limits of what its propagator wrote (the excess dropped, the job never refused);
a worker reads a stored value only up to MAX_TRACE_CONTEXT_LENGTH and only if it parses
as a flat object of strings (anything else is dropped: the job runs without it). Every
drop is counted (`trace_context_dropped`) and logged (rate-limited per cause)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from opentelemetry import baggage, propagate
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, current_job
from platform_common.jobs.queue.trace_context import (
    MAX_BAGGAGE_BYTES,
    MAX_TRACE_CONTEXT_LENGTH,
    MAX_TRACESTATE_LENGTH,
    MAX_TRACESTATE_MEMBERS,
    bounded_json,
)
from platform_common.jobs.queue.tracing import TRACE_CONTEXT_FIELD, QueueTracing
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Worker
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings
from tests.support.stored_jobs import stored_fields, to_job_hash

DINING = QueueKeys("dining")
TRACING = "platform_common.jobs.queue.tracing"
CONSUMER = "platform_common.jobs.worker"

# What one propagator wrote: W3C allows a tracestate of 32 members and 512 characters
# (a member over 128 characters is the first to go), baggage of 8192 bytes.
SMALL_MEMBERS = ["first=1", "second=2"]
LARGE_MEMBER = "large=" + "x" * 200
TRACESTATE = ",".join([*SMALL_MEMBERS, LARGE_MEMBER, *(f"m{i}=vvvvvvvvvv" for i in range(300_000))])
BAGGAGE = ",".join(f"key{i}={'v' * 100}" for i in range(10_000))
VENDOR_HEADER = "x-vendor-trace"


class Oversized(TextMapPropagator):
    """A propagator writing far more than W3C allows: a tracestate of about 5 MB,
    about 1 MB of baggage and a 1 MB header of its own (besides the W3C traceparent
    the trace context propagator writes)."""

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        setter.set(carrier, "tracestate", TRACESTATE)
        setter.set(carrier, "baggage", BAGGAGE)
        setter.set(carrier, VENDOR_HEADER, "v" * 1_000_000)

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        return context if context is not None else Context()

    @property
    def fields(self) -> set[str]:
        return {"tracestate", "baggage", VENDOR_HEADER}


@pytest.fixture
def oversized_propagator() -> Iterator[None]:
    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), Oversized()])
    )
    try:
        yield
    finally:
        propagate.set_global_textmap(previous)


def warnings_of(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name and r.levelno == logging.WARNING]


def members(header: str) -> list[str]:
    return header.split(",")


async def test_a_propagator_writing_megabytes_stores_only_what_w3c_allows(
    redis_url: str,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    oversized_propagator: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger=TRACING)
    alone, batch = make_job(), [make_job(), make_job()]
    async with await JobQueue.connect(fast_settings(redis_url), tracer_provider=provider) as queue:
        assert await queue.enqueue(alone) == alone["job_id"]  # never refused for it
        assert await queue.enqueue_many(batch) == [job["job_id"] for job in batch]
        dropped = queue.trace_context_dropped
    for job in (alone, *batch):
        stored = (await stored_fields(redis_client, DINING, job["job_id"]))[TRACE_CONTEXT_FIELD]
        assert len(stored) <= MAX_TRACE_CONTEXT_LENGTH
        headers = json.loads(stored)
        assert VENDOR_HEADER not in headers
        # The tracestate: the large member went first, then members from the end, until
        # both limits held; one more member would break one of them.
        kept = members(headers["tracestate"])
        assert kept[:2] == SMALL_MEMBERS and LARGE_MEMBER not in kept
        assert len(kept) <= MAX_TRACESTATE_MEMBERS
        assert len(headers["tracestate"]) <= MAX_TRACESTATE_LENGTH
        small = [m for m in members(TRACESTATE) if len(m) <= 128]
        assert kept == small[: len(kept)]
        one_more = small[: len(kept) + 1]
        assert len(one_more) > MAX_TRACESTATE_MEMBERS or (
            len(",".join(one_more)) > MAX_TRACESTATE_LENGTH
        )
        # The baggage: whole members from the start, as many as fit the byte cap.
        kept_baggage = members(headers["baggage"])
        assert kept_baggage == members(BAGGAGE)[: len(kept_baggage)]
        assert len(headers["baggage"].encode()) <= MAX_BAGGAGE_BYTES
        assert len(",".join(members(BAGGAGE)[: len(kept_baggage) + 1])) > MAX_BAGGAGE_BYTES
    # The traceparent is kept: the lone job is still a child of its send span.
    sends = [s for s in exporter.get_finished_spans() if s.name == "send dining"]
    alone_send = next(
        s for s in sends if (s.attributes or {}).get("messaging.message.id") == alone["job_id"]
    )
    assert alone_send.context is not None
    alone_stored = (await stored_fields(redis_client, DINING, alone["job_id"]))[TRACE_CONTEXT_FIELD]
    assert json.loads(alone_stored)["traceparent"] == (
        f"00-{alone_send.context.trace_id:032x}-{alone_send.context.span_id:016x}-"
        f"{alone_send.context.trace_flags:02x}"
    )
    # Counted per enqueue call (the batch stores one context), logged once per cause.
    assert dropped == {"tracestate": 2, "baggage": 2, "other_headers": 2}
    lines = [r.getMessage() for r in warnings_of(caplog, TRACING)]
    assert len(lines) == 3, lines
    for cause in ("tracestate", "baggage", VENDOR_HEADER):
        assert sum(cause in line for line in lines) == 1, (cause, lines)


async def test_baggage_within_the_cap_is_stored_whole(
    redis_url: str,
    redis_client: RedisClient,
    provider: TracerProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The default propagators (W3C trace context and baggage) within the limits: nothing
    is dropped, nothing is logged."""
    caplog.set_level("WARNING", logger=TRACING)
    job = make_job()
    carried = baggage.set_baggage("tenant", "acme", context=Context())
    async with await JobQueue.connect(fast_settings(redis_url), tracer_provider=provider) as queue:
        token = otel_context.attach(carried)
        try:
            with provider.get_tracer("test").start_as_current_span("orchestrate"):
                await queue.enqueue(job)
        finally:
            otel_context.detach(token)
        assert queue.trace_context_dropped == {}
    stored = (await stored_fields(redis_client, DINING, job["job_id"]))[TRACE_CONTEXT_FIELD]
    assert json.loads(stored)["baggage"] == "tenant=acme"
    assert warnings_of(caplog, TRACING) == []


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
@pytest.mark.cluster_sample(planted=("hostile",))
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
        leases = AttemptCalls(queue.connection, "dining")
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


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_traceparent_longer_than_w3c_allows_is_dropped() -> None:
    headers = {"traceparent": TRACEPARENT + "-extra", "vendor": "v"}
    text, dropped = bounded_json(headers)
    assert json.loads(text) == {"vendor": "v"}
    assert list(dropped) == ["traceparent"]


def test_escapes_count_against_the_stored_length() -> None:
    """Baggage within its byte cap whose JSON escapes (6 characters per non-ASCII
    character) would exceed the stored length is dropped whole; the traceparent stays."""
    carried = ",".join(f"k{i}={'é' * 90}" for i in range(40))
    assert len(carried.encode()) <= MAX_BAGGAGE_BYTES
    text, dropped = bounded_json({"traceparent": TRACEPARENT, "baggage": carried})
    assert len(text) <= MAX_TRACE_CONTEXT_LENGTH
    assert json.loads(text) == {"traceparent": TRACEPARENT}
    assert list(dropped) == ["baggage"]


def test_a_stored_tracestate_beyond_the_limits_is_trimmed_when_read(
    provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """A context an older producer stored with 40 tracestate members: the worker keeps
    the trace (its process span is the traceparent's child) and the first 32 members."""
    caplog.set_level("WARNING", logger=TRACING)
    state = ",".join(f"m{i}=v" for i in range(40))
    stored = json.dumps({"traceparent": TRACEPARENT, "tracestate": state})
    tracing = QueueTracing(provider, client_id="worker-1")
    job = tracing.process("dining", "job-1", 1, 3, stored)
    job.end()
    span = job.span
    assert isinstance(span, ReadableSpan) and span.parent is not None
    assert span.parent.trace_id == int(TRACEPARENT.split("-")[1], 16)
    assert span.parent.span_id == int(TRACEPARENT.split("-")[2], 16)
    assert list(span.parent.trace_state.keys()) == [f"m{i}" for i in range(32)]
    assert tracing.dropped == {"tracestate": 1}
    (line,) = [r.getMessage() for r in warnings_of(caplog, TRACING)]
    assert line.startswith("trace context of job=job-1 agent_type=dining read: tracestate of 40")
