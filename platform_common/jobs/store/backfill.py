"""Fill the time index from the records already stored (idempotent; safe under traffic).

    agentjobs backfill [--dry-run | --verify] [--batch N] [--quiet]
    (or python -m platform_common.jobs backfill ...)

Reads JOB_STORE_URL and OTEL_SERVICE_NAME like the agent does. Upserts one index entry
for every live record of the agent; entries already there are counted, not
rewritten; records that vanish mid-run or are malformed are skipped (and reported).

It runs between the two switches of time_index.py: after index writes are on
everywhere, and again with --verify (nothing written; exit 1 while a record lacks its
entry) until it exits 0, before reads go on (docs/user-guide.md has the rollout).
--dry-run writes nothing either. `run` is the backfill itself; the command's options
and progress bar are in `platform_common.jobs.cli.store_commands`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..errors import ConfigurationError
from .factory import make_job_store
from .listing import BackfillReport
from .redis_store import RedisJobStore

__all__ = ["BackfillProgress", "run", "summary", "unindexed"]

BackfillProgress = Callable[[int, int | None], None]
"""Told (records scanned so far, the store's estimate of its record count or None)."""


async def run(
    *,
    dry_run: bool = False,
    batch: int = 500,
    progress: BackfillProgress | None = None,
    announce: Callable[[str], None] | None = None,
) -> BackfillReport:
    """Backfill the store `make_job_store()` configures; `announce` is told the target
    (redacted URL and agent namespace) first, `progress` after every batch.

    Refuses an in-memory store (ConfigurationError): a fresh process's memory holds
    nothing to backfill, so a run there would only ever report zeros."""
    store = make_job_store()
    if not isinstance(store, RedisJobStore):
        await store.close()
        raise ConfigurationError(
            "JOB_STORE_URL", "backfill needs a Redis store (redis://...); it is unset or memory://"
        )
    if announce is not None:
        announce(f"backfill target: {store.settings.redacted_url()} agent {store.agent!r}")
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


def summary(report: BackfillReport, *, verify: bool = False) -> str:
    """What the run did, for people (and scripts that grep it)."""
    if verify:
        head, verb = "verify (nothing written): ", "missing"
    elif report.dry_run:
        head, verb = "dry run (nothing written): ", "would add"
    else:
        head, verb = "", "added"
    text = (
        f"{head}scanned {report.scanned:,}, {verb} {report.added:,}, "
        f"already present {report.present:,}, skipped {report.skipped:,}"
    )
    if report.malformed:
        text += f"\nmalformed records (not indexed): {', '.join(report.malformed)}"
    if report.bad_buckets:
        text += (
            f"\nindex keys that are not sorted sets (delete them, run again): "
            f"{', '.join(report.bad_buckets)}"
        )
    return text


def unindexed(report: BackfillReport) -> str | None:
    """Why index reads may not be turned on yet after this (dry or verify) run, or None.

    A record without its entry would be missing from every indexed listing; one in a
    bucket whose key is not a sorted set cannot get one. Malformed records are listed by
    neither path, so they do not hold reads back (they are reported all the same)."""
    problems = []
    if report.added:
        problems.append(f"{report.added:,} records lack their index entry")
    if report.bad_buckets:
        problems.append(f"{len(report.bad_buckets)} index keys are not sorted sets")
    if not problems:
        return None
    return (
        f"{' and '.join(problems)}: keep index reads off; with index writes on everywhere, "
        "run the backfill and verify again"
    )


if __name__ == "__main__":
    # The old command line: the CLI imports this module, so it does not import the CLI
    # back; a migration script still calling it is told where the command went (never a
    # silent success).
    sys.exit("error: run `agentjobs backfill` (or `python -m platform_common.jobs backfill`)")
