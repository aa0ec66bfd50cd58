"""OpenTelemetry traces across the queue: a send span per enqueue call, a process span per
attempt, a settle span per transition; the producer's trace context travels in the job.
docs/user-guide.md, "Tracing", lists the spans, the stored context and its bounds.

Only `opentelemetry-api` is used. Without an SDK a worker starts no span at all: an
attempt gets NO_TRACE, or when its job carries a creation context, a JobTrace that parses
it only if a log line asks for its ids. Attributes follow the messaging conventions
(v1.44.0, whose schema URL the tracer declares). `messaging.system` is
"platform_common.jobs": the conventions name no value for a queue built on Redis lists,
and "redis" would name the storage, not the protocol. `server.address`/`server.port` are
the settings' Redis (for a cluster or sentinels the first address configured: the
conventions ask for the address the client was given, without a lookup);
`messaging.client.id` is the worker id, on a worker's spans. A job of an enqueue_many
batch is processed in a trace of its own, linked to the batch's send span
(RELATION_KEY = "link"), so one batch does not make one trace of thousands of jobs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final

from opentelemetry import context, propagate, trace
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)
from opentelemetry.util.types import Attributes

from .log_text import describe
from .trace_context import UNPARSABLE, TraceContextDrops, bounded_json, read_stored, trim_to_w3c

if TYPE_CHECKING:
    from ..redis.url import RedisSettings

__all__ = [
    "MESSAGING_SYSTEM",
    "NO_TRACE",
    "RELATION_KEY",
    "SCHEMA_URL",
    "TRACE_CONTEXT_FIELD",
    "JobTrace",
    "QueueTracing",
    "Settle",
    "server_attributes",
]

log = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "platform_common.jobs"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
MESSAGING_SYSTEM = "platform_common.jobs"
TRACE_CONTEXT_FIELD = "trace_context"
"""The job hash field holding the creation context (a JSON object of propagation headers)."""
RELATION_KEY = "relation"
"""Key beside the headers: "link" for a job of a batch (processed in a trace of its own)."""
GLOBAL_PROVIDER_RECHECK_SECONDS = 1.0
"""How long a worker without a tracer provider goes on without looking whether an SDK
was set up globally since."""
PRODUCER_DROP_LINES = 1
"""WARNING lines per drop cause and minute of a producer: each repeats what its
propagator writes beyond the limits, the count goes on regardless."""
WORKER_DROP_LINES = 10
"""WARNING lines per drop cause and minute of a worker: each names the job whose stored
trace context was dropped (as many as the failed attempts' lines)."""

# Settle operation names by the outcome the script reported (anything else keeps the
# name of the operation tried).
_SETTLED_AS: Final = {
    "succeeded": "complete",
    "retrying": "retry",
    "dead": "dead_letter",
    "failed": "fail",
    "released": "release",
    "expired": "expire",
}
_EMPTY_CONTEXT: Final = context.Context()


def _error(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


class Settle:
    """A settle span (a no-op one without tracing): `outcome()` names it after what
    the script did; an exception leaving the `with` block is recorded on it."""

    __slots__ = ("_job", "span")

    def __init__(self, span: Span, job: JobTrace | None = None) -> None:
        self.span = span
        self._job = job

    def outcome(self, outcome: str) -> None:
        if self._job is None:
            return
        outcome = str(outcome)  # a plain str: exporters need not know the package's enums
        self._job.outcome(outcome)
        operation = _SETTLED_AS.get(outcome)
        if operation is not None:
            self.span.update_name(f"{operation} {self._job.agent_type}")
            self.span.set_attribute("messaging.operation.name", operation)
        self.span.set_attribute("job.outcome", outcome)

    def __enter__(self) -> Settle:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._job is None:
            return
        if exc is not None:
            _error(self.span, exc)
        self.span.end()


_NO_SETTLE: Final = Settle(INVALID_SPAN)


class JobTrace:
    """The trace of one attempt: its process span and the ids its log lines carry."""

    __slots__ = (
        "_carried", "_drops", "_ended", "_span_context", "_stored", "_tracing", "agent_type",
        "job_id", "span",
    )  # fmt: skip

    def __init__(
        self,
        span: Span,
        span_context: SpanContext | None = None,
        tracing: QueueTracing | None = None,
        job_id: str = "",
        agent_type: str = "",
        carried: context.Context = _EMPTY_CONTEXT,
        *,
        stored: str = "",
        drops: TraceContextDrops | None = None,
    ) -> None:
        self.span = span
        self._span_context = span_context
        self._stored = stored  # a creation context not parsed yet (see span_context)
        self._drops = drops  # counts a stored context dropped when it is parsed
        self._tracing = tracing
        self.job_id = job_id
        self.agent_type = agent_type
        self._carried = carried  # what the job carried beside its trace (baggage)
        self._ended = False

    @property
    def span_context(self) -> SpanContext | None:
        """Whose ids log lines carry: the process span's, or without an SDK the
        producer's (so a log search still finds the trace); None: no trace at all.
        Without an SDK the stored context is parsed here, on first use: most attempts
        never log a line, and parsing costs more than the rest of their tracing."""
        if self._stored and self._drops is not None:
            stored, self._stored = self._stored, ""
            about = _About(self.job_id, self.agent_type, "its log lines carry no trace ids")
            self._span_context = _creation_ids(stored, self._drops, about)
        return self._span_context

    @property
    def recording(self) -> bool:
        return self._tracing is not None

    def log_fields(self) -> dict[str, str]:
        """`trace_id` and `span_id` (W3C hex) for a log line's `extra=`; empty without a trace."""
        return _ids_fields(self.span_context)

    def log_text(self) -> str:
        """The same ids as ` trace_id=... span_id=...` for a text line ("" without a trace)."""
        return "".join(f" {name}={value}" for name, value in self.log_fields().items())

    def enter(self) -> None:
        """Make the process span the current one (in the handler's context, which this
        runs in), so the handler's own spans are its children."""
        if self._tracing is not None:
            context.attach(trace.set_span_in_context(self.span, self._carried))

    def failed(self, exc: BaseException) -> None:
        """The handler raised `exc` (or the stored job could not run)."""
        if self._tracing is not None:
            _error(self.span, exc)

    def outcome(self, outcome: str, *, error: str | None = None) -> None:
        """How the attempt ended (job.outcome); `error` marks the span failed."""
        if self._tracing is None:
            return
        self.span.set_attribute("job.outcome", str(outcome))
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))

    def cancelled(self, reason: str | None) -> None:
        """The job was cancelled while this attempt ran: an event on the process span."""
        if self._tracing is None:
            return
        attributes = {} if reason is None else {"job.cancel_reason": reason}
        self.span.add_event("job.cancelled", attributes)
        self.span.set_attribute("job.outcome", "cancelled")

    def settle(self, operation: str) -> Settle:
        """A settle span (child of the process span) around recording the outcome."""
        if self._tracing is None:
            return _NO_SETTLE
        return Settle(self._tracing.start_settle(self, operation), self)

    def end(self) -> None:
        if self._tracing is not None and not self._ended:
            self._ended = True
            self.span.end()


NO_TRACE: Final = JobTrace(INVALID_SPAN)
"""The trace of an attempt without tracing and without a stored creation context."""


def server_attributes(redis: RedisSettings) -> dict[str, str | int]:
    """`server.address` and `server.port` of the spans of a client of `redis`: its host
    and port, for a cluster or sentinels the first configured (the one the client was
    given; the node that answers is not looked up per span)."""
    return {"server.address": redis.host, "server.port": redis.port}


class QueueTracing:
    """The queue's tracer: spans for producers and workers, the context they pass on.

    `server`: server_attributes() of the Redis the spans' operations go to; `client_id`:
    the worker id (messaging.client.id), for a worker's spans."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        server: dict[str, str | int] | None = None,
        client_id: str | None = None,
    ) -> None:
        # Whether spans may be recorded: known for a provider given; for the global one,
        # True once an SDK is set (for good: it cannot be unset), else looked at again
        # after GLOBAL_PROVIDER_RECHECK_SECONDS (the look reads os.environ: a few us).
        self._provider = tracer_provider
        self._recording = tracer_provider is not None and _records(tracer_provider)
        self._recheck_at = float("inf") if tracer_provider is not None else 0.0
        self._tracer = trace.get_tracer(
            INSTRUMENTATION_NAME, schema_url=SCHEMA_URL, tracer_provider=tracer_provider
        )
        # On every span (send: the server only; a producer has no client id).
        self._server: dict[str, str | int] = dict(server or {})
        self._client: dict[str, str | int] = dict(self._server)
        if client_id:
            self._client["messaging.client.id"] = client_id
        # Per agent type, computed once: the hot path allocates no name or attribute dict.
        self._send: dict[str, tuple[str, Attributes]] = {}
        self._process: dict[str, tuple[str, Attributes]] = {}
        self.drops = TraceContextDrops(
            log, limit=WORKER_DROP_LINES if client_id else PRODUCER_DROP_LINES
        )

    @property
    def dropped(self) -> dict[str, int]:
        """Trace contexts (or parts) dropped by the bounds so far, by cause
        (queue.trace_context): `traceparent`, `tracestate`, `baggage`, `other_headers`
        when sent; when read, those and `oversized`, `unparsable`."""
        return dict(self.drops.counts)

    # -- producer ------------------------------------------------------------------
    def start_send(self, agent_type: str | None, *, batch_size: int | None = None) -> Span:
        """The send span of one enqueue call (agent_type None: a batch of several types).
        Without an SDK, the API's invalid span (nothing is started)."""
        if not self.may_record():
            return INVALID_SPAN
        key = agent_type or ""
        named = self._send.get(key)
        if named is None:
            attributes: dict[str, str | int] = {
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
                **self._server,
            }
            if agent_type:
                attributes["messaging.destination.name"] = agent_type
            named = self._send[key] = (f"send {agent_type}" if agent_type else "send", attributes)
        span = self._tracer.start_span(named[0], kind=SpanKind.PRODUCER, attributes=named[1])
        if batch_size is not None and span.is_recording():
            span.set_attribute("messaging.batch.message_count", batch_size)
        return span

    def creation_context(self, span: Span, *, batch: bool = False) -> str:
        """The TRACE_CONTEXT_FIELD value for jobs sent under `span`: its context if it
        has one, else the caller's current one (a trace started elsewhere goes on even
        without an SDK here), within the bounds (queue.trace_context); "" when there is
        no trace at all (nothing is stored)."""
        if span.get_span_context().is_valid:
            carried = trace.set_span_in_context(span)
        elif trace.get_current_span().get_span_context().is_valid:
            carried = context.get_current()
        else:
            return ""
        headers: dict[str, str] = {}
        propagate.inject(headers, context=carried)
        if not headers:
            return ""
        if batch:
            headers[RELATION_KEY] = "link"
        stored, dropped = bounded_json(headers, keep=RELATION_KEY)
        for cause, what in dropped.items():
            self.drops.dropped(cause, f"trace context of an enqueue: {what}; the rest is stored")
        if dropped and headers.keys() <= {RELATION_KEY}:
            return ""  # nothing of the trace is left
        return stored

    @staticmethod
    def sent(span: Span, job_id: str) -> None:
        if span.is_recording():
            span.set_attribute("messaging.message.id", job_id)

    @staticmethod
    def send_failed(span: Span, exc: BaseException) -> None:
        if span.is_recording():
            _error(span, exc)

    # -- worker --------------------------------------------------------------------
    def process(
        self,
        agent_type: str,
        job_id: str,
        attempt: int,
        max_attempts: int,
        stored_context: str | None,
    ) -> JobTrace:
        """Start the process span of one attempt: a child of the job's creation context
        (a new trace linked to it for a job of a batch; a new trace when the job carries
        none, or one that does not parse: tracing never fails a job)."""
        if not self.may_record():
            if not stored_context:
                return NO_TRACE
            return JobTrace(
                INVALID_SPAN, job_id=job_id, agent_type=agent_type, stored=stored_context,
                drops=self.drops,
            )  # fmt: skip
        parent = extracted = _EMPTY_CONTEXT
        links: list[Link] | None = None
        creation: SpanContext | None = None
        if stored_context:
            about = _About(job_id, agent_type, "the job runs without it")
            extracted, linked = _extract(stored_context, self.drops, about)
            creation = trace.get_current_span(extracted).get_span_context()
            if creation.is_valid:
                links = [Link(creation)]
                if not linked:
                    parent = extracted
            else:
                creation = None
        named = self._process.get(agent_type)
        if named is None:
            named = self._process[agent_type] = (
                f"process {agent_type}",
                {
                    "messaging.system": MESSAGING_SYSTEM,
                    "messaging.operation.type": "process",
                    "messaging.operation.name": "process",
                    "messaging.destination.name": agent_type,
                    **self._client,
                },
            )
        span = self._tracer.start_span(
            named[0], context=parent, kind=SpanKind.CONSUMER, attributes=named[1], links=links
        )
        if not span.is_recording():
            if creation is None:
                return NO_TRACE
            return JobTrace(INVALID_SPAN, creation)
        span.set_attributes(
            {
                "messaging.message.id": job_id,
                "job.attempt": attempt,
                "job.max_attempts": max_attempts,
            }
        )
        return JobTrace(span, span.get_span_context(), self, job_id, agent_type, extracted)

    def may_record(self) -> bool:
        """False while no SDK is there to record spans: no provider was given and none is
        set globally (the API's proxy stands in), or the one given is the API's no-op.
        Asked per attempt, so an SDK set up globally after the worker started is used
        (within GLOBAL_PROVIDER_RECHECK_SECONDS)."""
        if self._recording:
            return True
        now = time.monotonic()
        if now < self._recheck_at:
            return False
        self._recording = _records(trace.get_tracer_provider())
        self._recheck_at = now + GLOBAL_PROVIDER_RECHECK_SECONDS
        return self._recording

    def creation_log_fields(self, stored: str, job_id: str, agent_type: str) -> dict[str, str]:
        """`trace_id` and `span_id` of the creation context a job record carries (its
        send span's, or for a job of a batch the batch's), for a log line about the job
        written where no attempt of it runs (the reaper's); empty when it carries none
        (or one dropped: counted and logged as when an attempt reads it)."""
        about = _About(job_id, agent_type, "the line about it carries no trace ids")
        return _ids_fields(_creation_ids(stored, self.drops, about) if stored else None)

    def start_settle(self, job: JobTrace, operation: str) -> Span:
        return self._tracer.start_span(
            f"{operation} {job.agent_type}",
            context=trace.set_span_in_context(job.span),
            kind=SpanKind.CLIENT,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.type": "settle",
                "messaging.operation.name": operation,
                "messaging.destination.name": job.agent_type,
                "messaging.message.id": job.job_id,
                **self._client,
            },
        )


def _ids_fields(ids: SpanContext | None) -> dict[str, str]:
    if ids is None:
        return {}
    return {"trace_id": format(ids.trace_id, "032x"), "span_id": format(ids.span_id, "016x")}


def _records(provider: TracerProvider) -> bool:
    """Is `provider` an SDK's (not the API's stand-in for none, nor its no-op)?"""
    return not isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider))


@dataclass(frozen=True, slots=True)
class _About:
    """Whose stored trace context is read, and what dropping it means there: for its
    drop's log line."""

    job_id: str
    agent_type: str
    consequence: str

    def dropped(self, drops: TraceContextDrops, cause: str, what: str, *, whole: bool) -> None:
        """Count and log a drop: of the `whole` context, or of `what` beyond the limits."""
        drops.dropped(
            cause,
            f"trace context of job={self.job_id} agent_type={self.agent_type} {what}; "
            f"{self.consequence if whole else 'the rest is read'}",
            job_id=self.job_id,
            agent_type=self.agent_type,
        )


def _creation_ids(stored: str, drops: TraceContextDrops, about: _About) -> SpanContext | None:
    """The span context a stored creation context names, or None (none valid in it)."""
    ids = trace.get_current_span(_extract(stored, drops, about)[0]).get_span_context()
    return ids if ids.is_valid else None


def _extract(stored: str, drops: TraceContextDrops, about: _About) -> tuple[context.Context, bool]:
    """The context a job carries and whether it is a batch's (link only). A value not
    read (over the length bound, not a flat JSON object of strings: another writer, a
    damaged or hostile field) is no context; it and anything beyond W3C's limits is
    dropped, counted and logged. Never raises: tracing never fails a job."""
    headers, cause, why = read_stored(stored)
    if headers is None:
        about.dropped(drops, cause, f"dropped: {why}", whole=True)
        return _EMPTY_CONTEXT, False
    linked = headers.pop(RELATION_KEY, None) == "link"
    for cause, what in trim_to_w3c(headers).items():
        about.dropped(drops, cause, f"read: {what}", whole=False)
    try:
        return propagate.extract(headers, context=_EMPTY_CONTEXT), linked
    except Exception as exc:  # a propagator's own failure is no reason to fail the job
        failed = f"dropped: the propagator failed on it: {describe(exc)}"
        about.dropped(drops, UNPARSABLE, failed, whole=True)
        return _EMPTY_CONTEXT, False
