"""Fill the time index from the records already stored (idempotent; safe under traffic).

    python -m platform_common.jobs.store.backfill [--dry-run] [--batch N] [--quiet]

Reads JOB_STORE_URL and OTEL_SERVICE_NAME like the agent does. Upserts one index entry
for every live record of the agent; entries already there are counted, not
rewritten; records that vanish mid-run or are malformed are skipped (and reported).

Rollout: run it, set JOBSTATE_TIME_INDEX_ENABLED=true on the agents, then run it once
more: the second run adds only the jobs created between the first run and the flip
(until then creates did not write index entries). A run with --dry-run writes nothing.
Exit status: 0 done, 2 configuration error or Redis unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TextIO

from ..errors import BackendUnavailable, ConfigurationError, ValidationError
from .factory import make_job_store
from .listing import BackfillReport

__all__ = ["main", "run"]


class ProgressBar:
    """A one-line bar on a terminal; plain periodic lines elsewhere (logs, CI)."""

    def __init__(self, stream: TextIO, total_hint: int | None, enabled: bool = True) -> None:
        self.stream = stream
        self.total = total_hint
        self.enabled = enabled
        self.tty = stream.isatty()
        self._last_line = 0.0

    def __call__(self, scanned: int) -> None:
        if not self.enabled:
            return
        if self.total:
            done = min(scanned / self.total, 1.0)
            bar = "#" * int(done * 30)
            text = f"backfill [{bar:<30}] {scanned:,} / ~{self.total:,} records"
        else:
            text = f"backfill: {scanned:,} records scanned"
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + text)
        elif now - self._last_line >= 2.0:
            self.stream.write(text + "\n")
            self._last_line = now
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")


def summary(report: BackfillReport) -> str:
    head = "dry run (nothing written): " if report.dry_run else ""
    verb = "would add" if report.dry_run else "added"
    text = (
        f"{head}scanned {report.scanned:,}, {verb} {report.added:,}, "
        f"already present {report.present:,}, skipped {report.skipped:,}"
    )
    if report.malformed:
        text += f"\nmalformed records (not indexed): {', '.join(report.malformed)}"
    return text


async def run(dry_run: bool, batch: int, quiet: bool, stream: TextIO) -> BackfillReport:
    store = make_job_store()
    try:
        total = await store.record_count_hint()
        progress = ProgressBar(stream, total, enabled=not quiet)
        report = await store.backfill_time_index(dry_run=dry_run, batch=batch, progress=progress)
        progress.finish()
        return report
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m platform_common.jobs.store.backfill",
        description="Upsert a time-index entry for every live JobStore record of this agent.",
    )
    parser.add_argument("--dry-run", action="store_true", help="count only, write nothing")
    parser.add_argument("--batch", type=int, default=500, help="records per round trip (500)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, summary only")
    args = parser.parse_args(argv)
    try:
        report = asyncio.run(run(args.dry_run, args.batch, args.quiet, sys.stderr))
    except (ConfigurationError, ValidationError, BackendUnavailable) as exc:
        print(f"backfill failed: {exc}", file=sys.stderr)
        return 2
    print(summary(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
