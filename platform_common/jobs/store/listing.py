"""Newest-first pages per owner: the index walk, lazy repair and the legacy-scan fallback.

Written once for every backend; a backend supplies the `IndexBackend` primitives.
A page reads each visible bucket (the owner's and the shared one) for `limit + 1`
entries below the cursor, merges them, fetches the records in one round trip and
drops (and later repairs) entries whose record has expired or been re-created.
"""

from __future__ import annotations

import heapq
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, InvalidCursor
from .record import JobRecord
from .time_index import buckets_for, decode_cursor, encode_cursor, job_id_of, owner_bucket

if TYPE_CHECKING:
    from .telemetry import StoreTelemetry

__all__ = ["BackfillReport", "IndexBackend", "Page", "list_page"]

logger = logging.getLogger("platform_common.jobs.store.listing")

# A page with many dangling entries keeps reading, in doubling steps of at most
# MAX_READ_STEP entries; past MAX_READ_ROUNDS it returns what it has with a cursor at
# the last entry examined, so a page's latency stays bounded.
MAX_READ_ROUNDS = 8
MAX_READ_STEP = 1000


@dataclass(frozen=True, slots=True)
class Page:
    """One page of `list_for_owner`."""

    rows: list[JobRecord]
    """Newest first; payload is None unless include_payload was asked for."""
    next_cursor: str | None
    """Pass back as `cursor` for the next page; None when this is the last page."""


@dataclass(slots=True)
class BackfillReport:
    """What a backfill did (or, with dry_run, would do)."""

    scanned: int = 0
    """Records looked at."""
    added: int = 0
    """Index entries written (dry run: that would be written)."""
    present: int = 0
    """Records whose entry was already there."""
    skipped: int = 0
    """Records gone before their turn, or malformed (reported, never indexed)."""
    dry_run: bool = False
    malformed: list[str] = field(default_factory=list)
    """Job ids of malformed records (at most 100 kept)."""
    bad_buckets: list[str] = field(default_factory=list)
    """Owner buckets whose index key holds another type than a sorted set: their records
    are skipped (nothing written there) until the key is deleted and the backfill rerun."""


Row = tuple[JobRecord, str]
"""A fetched record with its exact index member."""


class IndexBackend(ABC):
    """The storage primitives a backend provides for listing."""

    agent: str
    index_reads: bool
    list_scan_cap: int
    telemetry: StoreTelemetry

    @abstractmethod
    async def _index_read(
        self, buckets: Sequence[str], before: str | None, count: int
    ) -> list[list[str]]:
        """Per bucket, up to `count` members strictly below `before`, newest first."""

    @abstractmethod
    async def _fetch_rows(self, job_ids: Sequence[str], include_payload: bool) -> list[Row | None]:
        """The records (None where missing), in order, in one round trip."""

    @abstractmethod
    async def _index_repair(self, entries: Sequence[tuple[str, str]]) -> int:
        """Remove (bucket, member) entries whose record is gone or re-created."""

    @abstractmethod
    async def _legacy_members(self, buckets: Sequence[str], cap: int) -> list[str]:
        """Members of the visible records among the first `cap` records scanned."""


async def list_page(
    store: IndexBackend, owner_oid: str, limit: int, cursor: str | None, include_payload: bool
) -> Page:
    after = decode_cursor(store.agent, owner_oid, cursor) if cursor is not None else None
    if not store.index_reads:
        return await _legacy_page(store, owner_oid, limit, after, include_payload, "disabled")
    try:
        page = await _index_page(store, owner_oid, limit, after, include_payload)
    except (InvalidCursor, BackendUnavailable):
        raise  # a bad cursor is the caller's; an unreachable backend has no scan to offer
    except Exception as exc:
        logger.warning(
            "time index read failed for agent %s (%s: %s); using the legacy scan",
            store.agent,
            type(exc).__name__,
            exc,
        )
        return await _legacy_page(store, owner_oid, limit, after, include_payload, "error")
    if not page.rows and after is None:
        return await _legacy_page(store, owner_oid, limit, after, include_payload, "empty")
    return page


async def _index_page(
    store: IndexBackend, owner_oid: str, limit: int, after: str | None, include_payload: bool
) -> Page:
    buckets = buckets_for(owner_oid)
    rows: list[Row] = []
    stale: list[tuple[str, str]] = []
    before = after
    exhausted = False
    count = 0
    for _ in range(MAX_READ_ROUNDS):
        # limit + 1 at first; when entries turn out dangling, read on in growing steps.
        count = min(max(limit + 1 - len(rows), 2 * count), MAX_READ_STEP)
        per_bucket = await store._index_read(buckets, before, count)
        tagged = [[(m, b) for m in members] for b, members in zip(buckets, per_bucket, strict=True)]
        candidates = list(heapq.merge(*tagged, reverse=True))[:count]
        if candidates:
            fetched = await store._fetch_rows(
                [job_id_of(m) for m, _ in candidates], include_payload
            )
            for (index_member, bucket), row in zip(candidates, fetched, strict=True):
                if row is not None and row[1] == index_member and _bucket_of(row) == bucket:
                    rows.append(row)
                else:
                    stale.append((bucket, index_member))
            before = candidates[-1][0]
        if len(candidates) < count:
            exhausted = True
            break
        if len(rows) > limit:
            break
    if stale:
        await _repair(store, stale)
    if len(rows) > limit:
        next_member: str | None = rows[limit - 1][1]
    elif not exhausted:  # stopped after MAX_READ_ROUNDS: continue from the last entry read
        next_member = before
    else:
        next_member = None
    return _page(store, owner_oid, rows[:limit], next_member)


async def _legacy_page(
    store: IndexBackend,
    owner_oid: str,
    limit: int,
    after: str | None,
    include_payload: bool,
    reason: str,
) -> Page:
    log = logger.debug if reason == "disabled" else logger.info
    log(
        "list_for_owner for agent %s uses the legacy scan (reason: %s, cap %d)",
        store.agent,
        reason,
        store.list_scan_cap,
    )
    store.telemetry.list_fallback(reason)
    members = await store._legacy_members(buckets_for(owner_oid), store.list_scan_cap)
    members.sort(reverse=True)
    if after is not None:
        members = [m for m in members if m < after]
    rows: list[Row] = []
    # Records may vanish between the scan and the fetch: fetch a little more than needed.
    while members and len(rows) <= limit:
        chunk, members = members[: limit + 1 - len(rows)], members[limit + 1 - len(rows) :]
        fetched = await store._fetch_rows([job_id_of(m) for m in chunk], include_payload)
        rows.extend(row for m, row in zip(chunk, fetched, strict=True) if row and row[1] == m)
    next_member = rows[limit - 1][1] if len(rows) > limit else None
    return _page(store, owner_oid, rows[:limit], next_member)


def _page(store: IndexBackend, owner_oid: str, rows: list[Row], next_member: str | None) -> Page:
    cursor = None if next_member is None else encode_cursor(store.agent, owner_oid, next_member)
    return Page([record for record, _ in rows], cursor)


def _bucket_of(row: Row) -> str:
    return owner_bucket(row[0].owner_oid)


async def _repair(store: IndexBackend, stale: list[tuple[str, str]]) -> None:
    # Best effort: a failed repair leaves entries the next page or the sweep removes.
    try:
        await store._index_repair(stale)
    except Exception as exc:
        logger.warning("time index repair failed for agent %s: %s", store.agent, exc)
