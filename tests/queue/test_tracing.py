"""One trace from enqueue to handler: send, process and settle spans (OpenTelemetry SDK,
in-memory exporter), the context kept in the job record, and log lines that carry it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, QueueSettings, current_job
from platform_common.jobs.queue.context import Handler
from platform_common.jobs.queue.tracing import MESSAGING_SYSTEM, TRACE_CONTEXT_FIELD
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores, Worker
from platform_common.jobs.worker.attempt_log import JsonFormatter
from platform_common.jobs.worker.chores import TTL_EXPIRED
from platform_common.jobs.worker.run_loop import NOT_STARTED
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings
from tests.support.stored_jobs import stored_fields

DINING = QueueKeys("dining")
CONSUMER = "platform_common.jobs.worker"
# A producer that traces (max 2 attempts, so a poison job is dead after two).
pytestmark = pytest.mark.queue(max_attempts=2, traced=True)


@asynccontextmanager
async def working(
    settings: QueueSettings, handler: Handler, provider: TracerProvider | None
) -> AsyncIterator[Worker]:
    worker = Worker(settings, "dining", handler, concurrency=4, tracer_provider=provider)
    task = asyncio.create_task(worker.run())
    ready = asyncio.create_task(worker.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()
    try:
        yield worker
    finally:
        worker.stop()
        await task


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


async def spans_named(exporter: InMemorySpanExporter, name: str, count: int) -> list[ReadableSpan]:
    """The `count` finished spans called `name`, oldest first (a span ends a moment after
    the result it recorded is readable)."""

    async def enough() -> list[ReadableSpan] | None:
        found = named(exporter, name)
        return found if len(found) >= count else None

    found = await eventually(enough)
    assert len(found) == count, [span.name for span in exporter.get_finished_spans()]
    return found


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def flaky(job: JobPayload) -> dict[str, Any]:
    """Fails its first attempt, succeeds on the next."""
    if current_job().attempt == 1:
        raise RuntimeError("kitchen closed")
    return {"ok": True}


async def test_one_trace_holds_the_send_span_each_attempt_and_its_settle_span(
    queue: JobQueue, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    job = make_job()
    with provider.get_tracer("orchestrator").start_as_current_span("plan trip") as root:
        await queue.enqueue(job)
    # The span current in the handler (its own spans would be children of it).
    spans_of_handler: list[int | None] = []

    async def handler(payload: JobPayload) -> dict[str, Any]:
        current = trace.get_current_span().get_span_context()
        spans_of_handler.append(current.span_id if current.is_valid else None)
        return await flaky(payload)

    async with working(queue.settings, handler, provider) as worker:
        await eventually(lambda: queue.get_result(job["job_id"]))
        first, second = await spans_named(exporter, "process dining", 2)
        (retry,) = await spans_named(exporter, "retry dining", 1)
        (complete,) = await spans_named(exporter, "complete dining", 1)
    (send,) = named(exporter, "send dining")
    trace_id, send_id = ids(send)
    assert send.kind == SpanKind.PRODUCER
    assert parent_id(send) == root.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "dining",
        "messaging.message.id": job["job_id"],
        "server.address": queue.settings.redis.host,
        "server.port": queue.settings.redis.port,
    }
    for number, process in enumerate((first, second), start=1):
        assert process.kind == SpanKind.CONSUMER
        assert ids(process)[0] == trace_id
        assert parent_id(process) == send_id
        assert [link.context.span_id for link in process.links] == [send_id]
        attributes = dict(process.attributes or {})
        assert attributes["messaging.message.id"] == job["job_id"]
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["job.attempt"] == number
        assert attributes["job.max_attempts"] == 2
    assert dict(first.attributes or {})["job.outcome"] == "retrying"
    assert dict(second.attributes or {})["job.outcome"] == "succeeded"
    # The handler's exception, on the span of its attempt.
    assert first.status.status_code == StatusCode.ERROR
    assert dict(first.attributes or {})["error.type"] == "RuntimeError"
    (event,) = [e for e in first.events if e.name == "exception"]
    assert dict(event.attributes or {})["exception.message"] == "kitchen closed"
    assert second.status.status_code == StatusCode.UNSET
    # Settle spans are children of their attempt's process span; the handler ran in it.
    assert parent_id(retry) == ids(first)[1]
    assert parent_id(complete) == ids(second)[1]
    assert dict(retry.attributes or {})["messaging.operation.type"] == "settle"
    assert spans_of_handler == [ids(first)[1], ids(second)[1]]
    # The worker's spans name the Redis server it was given and the worker (messaging
    # conventions v1.44: server.address/server.port, messaging.client.id).
    redis = queue.settings.redis
    for span in (first, second, retry, complete):
        attributes = dict(span.attributes or {})
        assert attributes["server.address"] == redis.host
        assert attributes["server.port"] == redis.port
        assert attributes["messaging.client.id"] == worker.worker_id


async def test_the_trace_context_lives_in_the_job_record_not_in_its_payload(
    queue: JobQueue, redis_client: RedisClient, exporter: InMemorySpanExporter
) -> None:
    job = make_job()
    await queue.enqueue(job)  # no span is current: the send span starts a trace of its own
    (send,) = named(exporter, "send dining")
    assert send.parent is None
    # Waiting, the record is the packed value: the context is its own line, apart from
    # the payload.
    fields = await stored_fields(redis_client, DINING, job["job_id"])
    stored = fields.get(TRACE_CONTEXT_FIELD)
    assert send.context is not None
    trace_id, span_id, flags = send.context.trace_id, send.context.span_id, send.context.trace_flags
    assert json.loads(stored or "{}") == {
        "traceparent": f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    }
    assert json.loads(fields["payload"]) == job
    packed = await redis_client.hget(DINING.queued, job["job_id"])
    assert packed.split("\n", 2)[1] == stored
    # Claimed, the job hash keeps it in its own field.
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")
    _, (claim,) = await AttemptCalls(queue.connection, "dining").claim("w", [(job["job_id"], "t")])
    assert claim.trace_context == stored
    record = await redis_client.hgetall(DINING.job(job["job_id"]))
    assert record[TRACE_CONTEXT_FIELD] == stored
    assert json.loads(record["payload"]) == job


async def test_an_enqueue_the_backend_refuses_is_an_error_on_its_send_span(
    queue: JobQueue, exporter: InMemorySpanExporter
) -> None:
    job = make_job()
    await queue.enqueue(job)
    with pytest.raises(InvalidPayload):
        await queue.enqueue(job)  # its job_id is taken: nothing is sent
    accepted, refused = named(exporter, "send dining")
    assert accepted.status.status_code == StatusCode.UNSET
    assert refused.status.status_code == StatusCode.ERROR
    assert dict(refused.attributes or {})["error.type"] == "InvalidPayload"
    assert [e.name for e in refused.events] == ["exception"]


async def test_jobs_of_a_batch_start_traces_of_their_own_linked_to_the_batch(
    queue: JobQueue, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    jobs = [make_job() for _ in range(3)]
    await queue.enqueue_many(jobs)
    async with working(queue.settings, lambda job: {"ok": True}, provider):
        processed = await spans_named(exporter, "process dining", 3)
    (send,) = named(exporter, "send dining")
    assert dict(send.attributes or {})["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in dict(send.attributes or {})
    send_trace, send_id = ids(send)
    for process in processed:
        assert process.parent is None
        assert ids(process)[0] != send_trace
        assert [(link.context.trace_id, link.context.span_id) for link in process.links] == [
            (send_trace, send_id)
        ]
    assert len({ids(process)[0] for process in processed}) == 3
    assert {dict(p.attributes or {})["messaging.message.id"] for p in processed} == {
        job["job_id"] for job in jobs
    }


async def test_a_dead_letter_requeued_keeps_the_link_to_its_enqueue(
    queue: JobQueue, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    job = make_job()
    await queue.enqueue(job)

    def poison(payload: JobPayload) -> None:
        raise ValueError("bad constraints")

    async with working(queue.settings, poison, provider):
        (dead,) = await spans_named(exporter, "dead_letter dining", 1)
    assert dict(dead.attributes or {})["job.outcome"] == "dead"
    assert await queue.dead_letters.requeue("dining", [job["job_id"]]) == [job["job_id"]]
    async with working(queue.settings, lambda payload: "fixed", provider):
        await spans_named(exporter, "complete dining", 1)
        processed = await spans_named(exporter, "process dining", 3)
    (send,) = named(exporter, "send dining")
    assert [parent_id(p) for p in processed] == [ids(send)[1]] * 3
    assert [[link.context.span_id for link in p.links] for p in processed] == [[ids(send)[1]]] * 3
    assert {ids(p)[0] for p in processed} == {ids(send)[0]}
    assert [dict(p.attributes or {})["job.attempt"] for p in processed] == [1, 2, 1]


async def test_a_job_without_a_trace_context_is_processed_in_a_trace_of_its_own(
    redis_url: str,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    settings = fast_settings(redis_url)
    untraced, garbled = make_job(), make_job()
    async with await JobQueue.connect(settings) as producer:  # the global no-op provider
        await producer.enqueue(untraced)
        await producer.enqueue(garbled)
        assert not await redis_client.hexists(DINING.job(untraced["job_id"]), TRACE_CONTEXT_FIELD)
        # Another writer's (or a damaged) value: tracing never fails a job over it.
        await redis_client.hset(DINING.job(garbled["job_id"]), TRACE_CONTEXT_FIELD, "{not json")
        async with working(settings, lambda job: {"done": True}, provider):
            for job in (untraced, garbled):
                result = await eventually(lambda job=job: producer.get_result(job["job_id"]))
                assert result.ok and result.result == {"done": True}
            processed = await spans_named(exporter, "process dining", 2)
    assert [p.parent for p in processed] == [None, None]
    assert [list(p.links) for p in processed] == [[], []]
    assert named(exporter, "send dining") == []


async def test_every_log_line_about_an_attempt_carries_its_trace_and_span_id(
    queue: JobQueue,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = make_job()
    await queue.enqueue(job)
    caplog.set_level("DEBUG", logger=CONSUMER)

    def poison(payload: JobPayload) -> None:
        raise RuntimeError("boom")

    async with working(queue.settings, poison, provider):
        processed = await spans_named(exporter, "process dining", 2)
    about_job = [
        r
        for r in caplog.records
        if r.name == CONSUMER
        and getattr(r, "job_id", None) == job["job_id"]
        and not r.getMessage().startswith("traceback of")
    ]
    messages = [r.getMessage() for r in about_job]
    expected = []
    for number, process in enumerate(processed, start=1):
        trace_id, span_id = (f"{ids(process)[0]:032x}", f"{ids(process)[1]:016x}")
        traced = f"trace_id={trace_id} span_id={span_id}"
        outcome = "retrying" if number == 1 else "dead"
        expected += [
            f"started job={job['job_id']} agent_type=dining attempt={number}/2 {traced}",
            f"attempt failed job={job['job_id']} agent_type=dining attempt={number}/2 "
            f"outcome={outcome} {traced} error=RuntimeError: boom",
        ]
        for record in about_job[2 * number - 2 : 2 * number]:
            assert (getattr(record, "trace_id", None), getattr(record, "span_id", None)) == (
                trace_id,
                span_id,
            )
            line = json.loads(JsonFormatter().format(record))
            assert (line["trace_id"], line["span_id"]) == (trace_id, span_id)
    assert messages == expected


@pytest.mark.single_node("a TTL running out; the trace on the line is the worker's own")
async def test_the_line_for_a_job_expired_at_its_ttl_carries_its_attempts_trace(
    queue: JobQueue,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Created 57 s ago with a 60 s TTL: its TTL passes during its first attempt (3 s is
    # ample for a worker to claim it, even on a loaded machine).
    created = datetime.now(UTC) - timedelta(seconds=57)
    job = make_job(created_at=created.isoformat(), ttl_seconds=60)
    await queue.enqueue(job)
    caplog.set_level("WARNING", logger=CONSUMER)

    async def endless(payload: JobPayload) -> None:
        await asyncio.Event().wait()  # never set: only the TTL ends this attempt

    # No cleanup chore meanwhile: the worker itself must expire the job at its TTL.
    settings = queue.settings.with_overrides(cleanup_interval=60)
    async with working(settings, endless, provider):
        (expire,) = await spans_named(exporter, "expire dining", 1)
        (process,) = await spans_named(exporter, "process dining", 1)
    assert parent_id(expire) == ids(process)[1]
    assert dict(expire.attributes or {})["job.outcome"] == "expired"
    assert dict(process.attributes or {})["job.outcome"] == "expired"
    assert process.status.status_code == StatusCode.ERROR
    (line,) = [r for r in caplog.records if r.getMessage().startswith("attempt failed")]
    trace_id, span_id = f"{ids(process)[0]:032x}", f"{ids(process)[1]:016x}"
    assert line.getMessage() == (
        f"attempt failed job={job['job_id']} agent_type=dining attempt=1/2 outcome=expired "
        f"trace_id={trace_id} span_id={span_id} "
        "error=TTL passed: the job did not finish within its ttl_seconds"
    )
    assert (getattr(line, "trace_id", None), getattr(line, "span_id", None)) == (trace_id, span_id)


async def test_without_an_sdk_in_the_worker_its_lines_carry_the_producers_trace(
    queue: JobQueue, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    job = make_job()
    await queue.enqueue(job)
    (send,) = named(exporter, "send dining")
    caplog.set_level("WARNING", logger=CONSUMER)

    def poison(payload: JobPayload) -> None:
        raise RuntimeError("boom")

    async with working(queue.settings, poison, None):  # the global no-op provider
        await eventually(lambda: queue.get_result(job["job_id"]))
    lines = [r for r in caplog.records if r.getMessage().startswith("attempt failed")]
    trace_id, span_id = ids(send)
    assert [(getattr(r, "trace_id", None), getattr(r, "span_id", None)) for r in lines] == [
        (f"{trace_id:032x}", f"{span_id:016x}")
    ] * 2
    assert len(exporter.get_finished_spans()) == 1  # the send span: the worker made none


async def test_without_any_trace_log_lines_are_unchanged(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = fast_settings(redis_url, max_attempts=1)
    job = make_job()
    caplog.set_level("WARNING", logger=CONSUMER)

    def poison(payload: JobPayload) -> None:
        raise RuntimeError("boom")

    async with await JobQueue.connect(settings) as producer:
        await producer.enqueue(job)
        async with working(settings, poison, None):
            await eventually(lambda: producer.get_result(job["job_id"]))
    (line,) = [r for r in caplog.records if r.getMessage().startswith("attempt failed")]
    assert line.getMessage() == (
        f"attempt failed job={job['job_id']} agent_type=dining attempt=1/1 outcome=dead "
        "error=RuntimeError: boom"
    )
    assert not hasattr(line, "trace_id")


async def lapse_lease(queue: JobQueue, redis_client: RedisClient, job_id: str) -> None:
    """Take and claim the job as a worker that then dies: its lease has lapsed."""
    assert await redis_client.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
    _, claims = await AttemptCalls(queue.connection, "dining").claim(
        "gone-worker", [(job_id, "t-1")]
    )
    assert [claim.job_id for claim in claims] == [job_id]
    await redis_client.zadd(DINING.leases, {job_id: 0})


async def test_the_reaper_reports_the_trace_context_of_each_attempt_it_ends(
    queue: JobQueue, redis_client: RedisClient, exporter: InMemorySpanExporter
) -> None:
    traced, untraced = make_job(), make_job()
    await queue.enqueue(traced)
    # The global no-op provider; one attempt per job, so its first is its last.
    one_attempt = queue.settings.with_overrides(max_attempts=1)
    async with await JobQueue.connect(one_attempt) as plain:
        await plain.enqueue(untraced)
    stored = (await stored_fields(redis_client, DINING, traced["job_id"])).get(TRACE_CONTEXT_FIELD)
    assert TRACE_CONTEXT_FIELD not in await stored_fields(redis_client, DINING, untraced["job_id"])
    for job in (traced, untraced):
        await lapse_lease(queue, redis_client, job["job_id"])
    report = await Chores(queue.connection, "dining").reap()
    assert sorted(report.ended) == sorted([
        (traced["job_id"], "retrying", stored),
        (untraced["job_id"], "dead", ""),
    ])  # fmt: skip
    assert stored and stored.startswith('{"traceparent"')


async def test_the_reapers_line_for_a_lapsed_lease_carries_the_producers_trace(
    queue: JobQueue,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = make_job()
    await queue.enqueue(job)
    (send,) = named(exporter, "send dining")
    await lapse_lease(queue, redis_client, job["job_id"])
    caplog.set_level("WARNING", logger=CONSUMER)
    async with working(queue.settings, lambda payload: {"ok": True}, provider):
        await eventually(lambda: queue.get_result(job["job_id"]))
    (line,) = [r for r in caplog.records if r.getMessage().startswith("attempt failed")]
    trace_id, span_id = f"{ids(send)[0]:032x}", f"{ids(send)[1]:016x}"
    assert line.getMessage() == (
        f"attempt failed job={job['job_id']} agent_type=dining attempt=?/? outcome=retrying "
        f"trace_id={trace_id} span_id={span_id} error=lease expired: the worker stopped renewing"
    )
    assert (getattr(line, "trace_id", None), getattr(line, "span_id", None)) == (trace_id, span_id)


async def test_the_line_for_a_job_expired_before_it_started_carries_the_producers_trace(
    queue: JobQueue,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job whose TTL passed while it waited is expired by the claim, never started:
    one line says so, with the ids of the producer's send span (no attempt ran)."""
    # A job of a longer TTL at the list's tail, in deadline order and far from due: the
    # cleanup's tail scan stops at it, so only the claim meets the job behind it (and
    # the cleanup runs once only, below, while the job ahead still waits there).
    ahead = make_job(ttl_seconds=3600)
    await queue.enqueue(ahead)
    job = make_job()
    await queue.enqueue(job)
    (send,) = [
        span
        for span in named(exporter, "send dining")
        if (span.attributes or {}).get("messaging.message.id") == job["job_id"]
    ]
    # Its deadline past in the packed value only: the claim expires it on the spot, while
    # its expiry bucket (of its real deadline) leaves it to the claim.
    header, rest = (await redis_client.hget(DINING.queued, job["job_id"])).split("\n", 1)
    numbers = header.split(",")
    numbers[1] = "1"
    await redis_client.hset(DINING.queued, job["job_id"], ",".join(numbers) + "\n" + rest)
    caplog.set_level("WARNING", logger=CONSUMER)

    def expired_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "outcome=expired" in r.getMessage()]

    async def logged() -> list[logging.LogRecord]:
        return expired_lines()

    # One cleanup run, at the start (the job ahead still at the tail), then none.
    settings = queue.settings.with_overrides(cleanup_interval=60)
    async with working(settings, lambda payload: {"ok": True}, provider) as worker:
        (line,) = await eventually(logged)
        await eventually(lambda: queue.get_result(ahead["job_id"], "dining"))
        assert worker.counts["succeeded"] == 1  # the job ahead, not this one
    outcome = await queue.get_result(job["job_id"], "dining")
    assert outcome is not None and outcome.status == "expired"
    trace_id, span_id = f"{ids(send)[0]:032x}", f"{ids(send)[1]:016x}"
    # The claim's line (the cleanup's, should it have met the job first, is the next test).
    assert line.getMessage() in {
        f"attempt failed job={job['job_id']} agent_type=dining attempt=?/? outcome=expired "
        f"trace_id={trace_id} span_id={span_id} error={error}"
        for error in (NOT_STARTED, TTL_EXPIRED)
    }
    assert (getattr(line, "trace_id", None), getattr(line, "span_id", None)) == (trace_id, span_id)
    assert len(expired_lines()) == 1
    processed = [
        (span.attributes or {}).get("messaging.message.id")
        for span in named(exporter, "process dining")
    ]
    assert processed == [ahead["job_id"]]


async def test_the_line_for_a_job_the_cleanup_expired_carries_the_producers_trace(
    queue: JobQueue,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job that waits past its TTL while the worker's one slot is busy is expired by the
    worker's cleanup (from the queue list's tail): one line per job, with the ids of the
    producer's send span, beside the run's count."""
    busy, release = asyncio.Event(), asyncio.Event()

    async def hold(payload: JobPayload) -> dict[str, bool]:
        busy.set()
        await release.wait()
        return {"ok": True}

    caplog.set_level("INFO", logger=CONSUMER)
    worker = Worker(
        queue.settings, "dining", hold, concurrency=1, tracer_provider=provider
    )  # fmt: skip
    task = asyncio.create_task(worker.run())
    try:
        await queue.enqueue(make_job(task="holds the only slot"))
        await asyncio.wait_for(busy.wait(), 20)
        created = datetime.now(UTC) - timedelta(seconds=60 - 0.3)
        job = make_job(created_at=created.isoformat(), ttl_seconds=60)
        await queue.enqueue(job)
        (send,) = [
            span
            for span in named(exporter, "send dining")
            if (span.attributes or {}).get("messaging.message.id") == job["job_id"]
        ]

        def lines() -> list[logging.LogRecord]:
            return [r for r in caplog.records if f"job={job['job_id']}" in r.getMessage()]

        async def logged() -> list[logging.LogRecord]:
            return lines()

        (line,) = await eventually(logged)
    finally:
        release.set()
        worker.stop()
        await task
    trace_id, span_id = f"{ids(send)[0]:032x}", f"{ids(send)[1]:016x}"
    assert line.getMessage() == (
        f"attempt failed job={job['job_id']} agent_type=dining attempt=?/? outcome=expired "
        f"trace_id={trace_id} span_id={span_id} error={TTL_EXPIRED}"
    )
    assert (getattr(line, "trace_id", None), getattr(line, "span_id", None)) == (trace_id, span_id)
    assert any(r.getMessage() == "cleanup expired 1 job(s)" for r in caplog.records)
    outcome = await queue.get_result(job["job_id"], "dining")
    assert outcome is not None and outcome.status == "expired"
    assert len(lines()) == 1


async def test_the_line_for_an_outcome_redis_refused_to_record_carries_its_trace(
    queue: JobQueue,
    redis_client: RedisClient,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fail script refuses a stats counter that does not parse (it writes nothing):
    the one ERROR line naming the job carries the attempt's trace and span ids."""
    job = make_job()
    await queue.enqueue(job)
    await redis_client.hset(DINING.stats, "retried", "many")
    caplog.set_level("WARNING", logger=CONSUMER)

    def poison(payload: JobPayload) -> None:
        raise RuntimeError("boom")

    async def refused() -> list[logging.LogRecord]:
        return [r for r in caplog.records if f"job={job['job_id']} " in r.getMessage()]

    async with working(queue.settings, poison, provider):
        (line,) = await eventually(refused)
        (process,) = await spans_named(exporter, "process dining", 1)
    trace_id, span_id = f"{ids(process)[0]:032x}", f"{ids(process)[1]:016x}"
    assert line.levelno == logging.ERROR
    assert f"job={job['job_id']} trace_id={trace_id} span_id={span_id} (its attempt" in (
        line.getMessage()
    )


def test_a_log_record_without_a_trace_has_no_trace_keys() -> None:
    record = logging.LogRecord(CONSUMER, logging.INFO, "", 0, "hello", None, None)
    assert "trace_id" not in json.loads(JsonFormatter().format(record))
