"""What tracing costs the queue (not a test): enqueue, enqueue_many and drain with the
package as it was before tracing (old: bench.tracing_old.OLD_REVISION, in a child
process), with tracing off (no SDK: OpenTelemetry's global no-op provider) and on (an SDK
TracerProvider with a BatchSpanProcessor and an exporter that drops every span), side by
side.

    .venv/bin/python -m bench.tracing [--jobs 3000] [--rounds 9] [--concurrency 32] [--no-old]

Starts its own redis-server. Each round measures every side once, against the same
server, the order rotating by one each round (old, off, on; off, on, old; ...): the
host's load drifts over seconds, and alternating puts every side under it alike, in every
position alike when --rounds is a multiple of 3. Many short rounds rather than a few long
ones: on a shared host one-by-one enqueue (a round trip per job) swings by a third from
round to round, and alternating often is what cancels that. The table shows the median
of the rounds. The phase code is bench.tracing_phases for all three sides; its drain is one
in-process Worker (no-op handler) taking N queued jobs, from its ready event to the last
completion. The target (issue 18): with no SDK the hot paths cost no more than before,
off's jobs/s at least 95% of old's for every phase.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench.queue_throughput import AGENT_TYPE, make_jobs
from bench.tracing_old import OLD_REVISION, OldRevision, OldRevisionError
from bench.tracing_phases import PHASES, measure
from tests.support.redis_server import RedisServer

OFF_WITHIN = 0.95
"""off's jobs/s over old's, at least, for every phase: "within 5% of today"."""

Rates = dict[str, list[float]]
"""jobs/s of each phase, one entry per round."""

Measure = Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, float]]
"""One side: jobs/s of each phase for these (single, many) jobs."""


class DroppingExporter(SpanExporter):
    """Takes every span and keeps none: what an SDK costs without an exporter's I/O."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def run_rounds(sides: dict[str, Measure], n: int, rounds: int) -> dict[str, Rates]:
    """Every side once per round, the order rotated by one each round; fresh jobs each."""
    results: dict[str, Rates] = {side: {phase: [] for phase in PHASES} for side in sides}
    names = list(sides)
    for round_number in range(rounds):
        shift = round_number % len(names)
        for side in names[shift:] + names[:shift]:
            single, many = make_jobs(n), make_jobs(n)
            gc.collect()  # each side starts without the garbage of the one before
            for phase, rate in sides[side](single, many).items():
                results[side][phase].append(rate)
    return results


def target(results: dict[str, Rates], phase: str) -> tuple[float, bool] | None:
    """off/old of `phase`'s medians and whether it meets OFF_WITHIN (None without old)."""
    if "old" not in results:
        return None
    ratio = statistics.median(results["off"][phase]) / statistics.median(results["old"][phase])
    return ratio, ratio >= OFF_WITHIN


def render(results: dict[str, Rates], header: str) -> str:
    """The table: a column of median jobs/s per side, then on/off and off/old."""
    sides = [side for side in ("old", "off", "on") if side in results]
    lines = [header]
    columns = "".join(f" {side + ' jobs/s':>12}" for side in sides)
    lines.append(f"{'operation':<14}{columns}  on/off" + ("  off/old" if "old" in results else ""))
    verdicts = []
    for phase in PHASES:
        medians = {side: statistics.median(results[side][phase]) for side in sides}
        cells = "".join(f" {medians[side]:>12,.0f}" for side in sides)
        row = f"{phase:<14}{cells}  {medians['on'] / medians['off']:6.2f}"
        met = target(results, phase)
        if met is not None:
            ratio, ok = met
            row += f"  {ratio:7.3f}"
            verdicts.append(f"{phase} {ratio:.3f} >= {OFF_WITHIN} {'met' if ok else 'MISSED'}")
        lines.append(row)
    if verdicts:
        lines.append("off within 5% of old (off/old jobs/s): " + "; ".join(verdicts))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--no-old", action="store_true", help=f"skip the pre-tracing column ({OLD_REVISION[:10]})"
    )
    args = parser.parse_args()
    exporter = DroppingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    try:
        with ExitStack() as stack:
            url = stack.enter_context(RedisServer()).url
            concurrency = args.concurrency
            sides: dict[str, Measure] = {}
            if not args.no_old:
                old = stack.enter_context(OldRevision())
                sides["old"] = lambda single, many: old.measure(
                    url, single, many, AGENT_TYPE, concurrency
                )
            sides["off"] = lambda single, many: measure(url, single, many, AGENT_TYPE, concurrency)

            def traced(
                single: list[dict[str, Any]], many: list[dict[str, Any]]
            ) -> dict[str, float]:
                rates = measure(url, single, many, AGENT_TYPE, concurrency, provider)
                # Spans still queued would be exported by the processor's thread during
                # the next side's round, in this process: off would pay for on's spans.
                provider.force_flush()
                return rates

            sides["on"] = traced
            run_rounds(sides, min(args.jobs, 1_000), 1)  # warm every side up
            results = run_rounds(sides, args.jobs, args.rounds)
    except OldRevisionError as error:
        raise SystemExit(f"bench.tracing: {error} (or run with --no-old)") from error
    finally:
        provider.shutdown()
    order = ", ".join(sides)
    header = (
        f"N = {args.jobs} no-op jobs, ~300-byte payload, one redis-server, in-process "
        f"worker (concurrency {args.concurrency}), median of {args.rounds} rounds "
        f"({order}, rotating), {os.cpu_count()} cores; {exporter.spans:,} spans exported"
        + ("" if args.no_old else f"; old = {OLD_REVISION[:10]} (before tracing), own process")
    )
    print(render(results, header), end="")


if __name__ == "__main__":
    main()
