"""OpenTelemetry for the JobStore: one span per verb, an operations counter, a duration histogram.

Only `opentelemetry-api` is used, so without an SDK every call is a no-op. A store takes
optional tracer/meter providers (tests pass SDK providers with in-memory exporters);
by default the global ones are used.

    span       platform_common.jobs.{verb}        db.system, job.id, job.agent
    counter    platform_common.jobs.operations    verb, outcome
    histogram  platform_common.jobs.operation.duration (s)   verb
    counter    platform_common.jobs.list_fallbacks reason  (list_for_owner used the legacy scan)
    counter    platform_common.jobs.index_write_skips verb  (create/delete went on without
               the time-index entry: the owner's index key holds another type)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context, metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from ..errors import (
    BackendUnavailable,
    IllegalTransition,
    JobConflict,
    JobNotFound,
    ValidationError,
    VersionConflict,
)

__all__ = [
    "DURATION_HISTOGRAM",
    "FALLBACK_COUNTER",
    "INDEX_SKIP_COUNTER",
    "OPERATIONS_COUNTER",
    "Operation",
    "StoreTelemetry",
    "outcome_of",
]

INSTRUMENTATION_NAME = "platform_common.jobs"
OPERATIONS_COUNTER = "platform_common.jobs.operations"
DURATION_HISTOGRAM = "platform_common.jobs.operation.duration"
FALLBACK_COUNTER = "platform_common.jobs.list_fallbacks"
INDEX_SKIP_COUNTER = "platform_common.jobs.index_write_skips"

# Outcome label values are a closed set, so the counter's cardinality stays bounded.
_OUTCOMES: tuple[tuple[type[BaseException], str], ...] = (
    (JobConflict, "conflict"),
    (JobNotFound, "not_found"),
    (VersionConflict, "version_conflict"),
    (IllegalTransition, "illegal_transition"),
    (ValidationError, "invalid"),
    (BackendUnavailable, "unavailable"),
)


def outcome_of(exc: BaseException) -> str:
    for kind, outcome in _OUTCOMES:
        if isinstance(exc, kind):
            return outcome
    return "error"


class Operation:
    """Handle yielded by `StoreTelemetry.operation`: lets the verb name the job and the outcome."""

    __slots__ = ("outcome", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.outcome = "ok"

    def job(self, job_id: str) -> None:
        self.span.set_attribute("job.id", job_id)


class StoreTelemetry:
    """The instruments of one store instance."""

    def __init__(
        self,
        *,
        db_system: str,
        agent: str,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.agent = agent
        self._base_attributes = {"db.system": db_system, "job.agent": agent}
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=meter_provider)
        self._operations = meter.create_counter(
            OPERATIONS_COUNTER,
            unit="{operation}",
            description="JobStore operations by verb and outcome.",
        )
        self._duration = meter.create_histogram(
            DURATION_HISTOGRAM, unit="s", description="Duration of JobStore operations."
        )
        self._fallbacks = meter.create_counter(
            FALLBACK_COUNTER,
            unit="{call}",
            description="list_for_owner calls served by the bounded legacy scan, by reason.",
        )
        self._index_skips = meter.create_counter(
            INDEX_SKIP_COUNTER,
            unit="{write}",
            description="Creates and deletes that went on without their time-index entry.",
        )

    @contextmanager
    def operation(self, verb: str) -> Iterator[Operation]:
        started = time.perf_counter()
        span = self._tracer.start_span(
            f"platform_common.jobs.{verb}", kind=SpanKind.CLIENT, attributes=self._base_attributes
        )
        # Only a recording span becomes the current one (so client spans nest under it):
        # attaching a context costs more than the rest of the no-op path together.
        token = context.attach(trace.set_span_in_context(span)) if span.is_recording() else None
        op = Operation(span)
        try:
            yield op
        except BaseException as exc:
            op.outcome = outcome_of(exc)
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            if token is not None:
                context.detach(token)
            span.end()
            self._operations.add(1, {"verb": verb, "outcome": op.outcome})
            self._duration.record(time.perf_counter() - started, {"verb": verb})

    def list_fallback(self, reason: str) -> None:
        self._fallbacks.add(1, {"reason": reason, "job.agent": self.agent})

    def index_skipped(self, verb: str) -> None:
        self._index_skips.add(1, {"verb": verb, "job.agent": self.agent})
