"""Every verb emits its span, counter and histogram (OpenTelemetry SDK in-memory exporters)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from platform_common.jobs import InMemoryJobStore, JobConflict, JobStatus
from platform_common.jobs.store.contract import BaseJobStore
from platform_common.jobs.store.telemetry import (
    DURATION_HISTOGRAM,
    FALLBACK_COUNTER,
    OPERATIONS_COUNTER,
)
from tests.support.stores import Harness


@dataclass
class Otel:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(spans, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
def store(otel: Otel, harness: Harness) -> BaseJobStore:
    """A store of each backend (tests/store/conftest.py) reporting to the in-memory SDK
    (`otel` first: its providers shut down after the harness closed the store)."""
    return harness.make(
        agent="otel-agent",
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )


async def test_every_verb_emits_a_span_with_the_documented_attributes(
    store: BaseJobStore, otel: Otel
) -> None:
    await store.create("j1", {"a": 1}, ttl_seconds=60)
    await store.get("j1")
    await store.update("j1", status=JobStatus.RUNNING)
    await store.exists("j1")
    await store.list_ids()
    await store.delete("j1")
    spans = otel.spans.get_finished_spans()
    assert [s.name for s in spans] == [
        f"platform_common.jobs.{verb}"
        for verb in ("create", "get", "update", "exists", "list_ids", "delete")
    ]
    for span in spans:
        assert span.attributes is not None
        assert span.attributes["db.system"] == store.db_system
        assert span.attributes["job.agent"] == "otel-agent"
        if span.name != "platform_common.jobs.list_ids":
            assert span.attributes["job.id"] == "j1"


async def test_counter_and_histogram_by_verb_and_outcome(store: BaseJobStore, otel: Otel) -> None:
    await store.create("j1", ttl_seconds=60)
    with pytest.raises(JobConflict):
        await store.create("j1", ttl_seconds=60)
    assert await store.get("missing") is None
    await store.get("j1")
    counts = {
        (p.attributes["verb"], p.attributes["outcome"]): p.value
        for p in otel.points(OPERATIONS_COUNTER)
    }
    assert counts == {
        ("create", "ok"): 1,
        ("create", "conflict"): 1,
        ("get", "not_found"): 1,
        ("get", "ok"): 1,
    }
    durations = {p.attributes["verb"]: p for p in otel.points(DURATION_HISTOGRAM)}
    assert durations["create"].count == 2 and durations["get"].count == 2
    assert 0 < durations["get"].sum < 5
    failed = [s for s in otel.spans.get_finished_spans() if s.status.status_code.name == "ERROR"]
    assert len(failed) == 1 and failed[0].events[0].name == "exception"


async def test_a_legacy_listing_is_counted_as_a_fallback(store: BaseJobStore, otel: Otel) -> None:
    await store.list_for_owner("u1")
    (point,) = otel.points(FALLBACK_COUNTER)
    assert point.attributes["reason"] == "disabled" and point.value == 1


async def test_without_an_sdk_telemetry_is_a_silent_no_op() -> None:
    store = InMemoryJobStore()  # global providers: the API's no-op defaults
    await store.create("j", ttl_seconds=5)
    assert await store.get("j") is not None
