"""The worker CLI with the OpenTelemetry SDK installed and spans written to a file.

    OTEL_SPANS_FILE=/tmp/spans.jsonl python -m tests.support.otel_file_worker \
        --agent-type dining --handler tests.support.queue_handlers:behave

Sets the global TracerProvider (what a deployment's SDK bootstrap does; the package
configures no exporter itself), then runs `python -m platform_common.jobs.worker`.
Every span is appended, as it ends, as one JSON line: name, kind, trace_id, span_id,
parent_span_id (hex, as in `traceparent`) and attributes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from platform_common.jobs.worker.__main__ import main as worker_main

SPANS_FILE_ENV = "OTEL_SPANS_FILE"


def span_line(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return json.dumps({
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
    })  # fmt: skip


class JsonLinesExporter(SpanExporter):
    """Appends each span as a JSON line, flushed at once (the test reads while we run)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(span_line(span) + "\n" for span in spans)
        with self._lock, self._path.open("a", encoding="utf-8") as spans_file:
            spans_file.write(lines)
        return SpanExportResult.SUCCESS


def main(argv: Sequence[str] | None = None) -> int:
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(Path(os.environ[SPANS_FILE_ENV])))
    )
    trace.set_tracer_provider(provider)
    try:
        return worker_main(argv)
    finally:
        provider.shutdown()


if __name__ == "__main__":
    sys.exit(main())
