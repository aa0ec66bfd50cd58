"""Fill the time index from the records already stored (idempotent; safe under traffic).

    python -m platform_common.jobs backfill [--dry-run] [--batch N] [--quiet]
    (alias: python -m platform_common.jobs.store.backfill ...)

Reads JOB_STORE_URL and OTEL_SERVICE_NAME like the agent does. Upserts one index entry
for every live record of the agent; entries already there are counted, not
rewritten; records that vanish mid-run or are malformed are skipped (and reported).

Rollout: run it, set JOBSTATE_TIME_INDEX_ENABLED=true on the agents, then run it once
more: the second run adds only the jobs created between the first run and the flip
(until then creates did not write index entries). A run with --dry-run writes nothing.
`run` is the backfill itself; the command's options and progress bar are in
`platform_common.jobs.cli.store_commands`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from .factory import make_job_store
from .listing import BackfillReport

__all__ = ["BackfillProgress", "main", "run", "summary"]

BackfillProgress = Callable[[int, int | None], None]
"""Told (records scanned so far, the store's estimate of its record count or None)."""


async def run(
    *, dry_run: bool = False, batch: int = 500, progress: BackfillProgress | None = None
) -> BackfillReport:
    """Backfill the store `make_job_store()` configures; `progress` after every batch."""
    store = make_job_store()
    try:
        total = await store.record_count_hint()

        def scanned(count: int) -> None:
            if progress is not None:
                progress(count, total)

        scanned(0)  # the total is known now: a bar can show it before the first batch
        return await store.backfill_time_index(
            dry_run=dry_run, batch=batch, progress=scanned if progress else None
        )
    finally:
        await store.close()


def summary(report: BackfillReport) -> str:
    """What the run did, for people (and scripts that grep it)."""
    head = "dry run (nothing written): " if report.dry_run else ""
    verb = "would add" if report.dry_run else "added"
    text = (
        f"{head}scanned {report.scanned:,}, {verb} {report.added:,}, "
        f"already present {report.present:,}, skipped {report.skipped:,}"
    )
    if report.malformed:
        text += f"\nmalformed records (not indexed): {', '.join(report.malformed)}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """The `backfill` command with `argv` (default: sys.argv[1:]); returns the exit status."""
    from ..cli import main as cli_main  # here: the CLI imports this module

    args = sys.argv[1:] if argv is None else argv
    return cli_main(["backfill", *args], prog="python -m platform_common.jobs")


if __name__ == "__main__":
    raise SystemExit(main())
