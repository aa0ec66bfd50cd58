"""InMemoryJobStore: the JobStore in one process's memory, with the Redis backend's semantics.

For unit tests, local development and single-replica deployments. Records are kept
as JSON text (so what comes back is what Redis would give back), expire by TTL
(checked on every access, and an expiry heap purges them so they never pile up),
and carry versions and the transition rules. No operation awaits in the middle of
a change, so concurrent asyncio tasks see each change whole.
"""

from __future__ import annotations

import asyncio
import heapq
import json
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import clock
from ..errors import JobConflict, JobNotFound
from ..status import JobStatus
from .contract import BaseJobStore, StoreOptions, UpdateSpec
from .listing import BackfillReport, Row
from .record import JobRecord
from .time_index import created_us, member, owner_bucket

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["InMemoryJobStore"]


@dataclass(slots=True)
class _Stored:
    status: JobStatus
    payload_json: str
    result_json: str | None
    error: str | None
    created_us: int
    updated_at: float
    version: int
    owner_oid: str
    expires_at: float

    def record(self, job_id: str, include_payload: bool = True) -> JobRecord:
        return JobRecord(
            job_id=job_id,
            status=self.status,
            payload=json.loads(self.payload_json) if include_payload else None,
            result=None if self.result_json is None else json.loads(self.result_json),
            error=self.error,
            created_at=self.created_us / 1_000_000,
            updated_at=self.updated_at,
            version=self.version,
            owner_oid=self.owner_oid,
        )


class InMemoryJobStore(BaseJobStore):
    """The memory:// backend. `now` replaces the clock (tests control time with it)."""

    db_system = "memory"

    def __init__(
        self, *, now: Callable[[], float] | None = None, **options: Unpack[StoreOptions]
    ) -> None:
        super().__init__(**options)
        # Looked up on every call, so monkeypatching clock.now works after construction too.
        self._now = now or (lambda: clock.now())
        self._records: dict[str, _Stored] = {}
        self._expiry: list[tuple[float, str]] = []
        self._index: dict[str, list[str]] = {}
        self._sweep_position: tuple[str, str] = ("", "")

    # -- verbs -------------------------------------------------------------
    async def _create(
        self, job_id: str, payload_json: str, ttl: int, status: JobStatus, owner_oid: str
    ) -> JobRecord:
        now = self._purge()
        if job_id in self._records:
            raise JobConflict(job_id)
        created = created_us(now)
        stored = _Stored(
            status=status,
            payload_json=payload_json,
            result_json=None,
            error=None,
            created_us=created,
            updated_at=created / 1_000_000,
            version=1,
            owner_oid=owner_oid,
            expires_at=now + ttl,
        )
        self._records[job_id] = stored
        self._schedule(stored.expires_at, job_id)
        if self.index_writes:
            self._index_add(owner_bucket(owner_oid), member(created, job_id))
        return stored.record(job_id)

    async def _get(self, job_id: str) -> JobRecord | None:
        self._purge()
        stored = self._records.get(job_id)
        return None if stored is None else stored.record(job_id)

    async def _update(self, job_id: str, spec: UpdateSpec) -> JobRecord:
        now = self._purge()
        stored = self._records.get(job_id)
        if stored is None:
            raise JobNotFound(job_id)
        spec.check(job_id, stored.version, stored.status)
        if spec.status is not None:
            stored.status = spec.status
        if spec.payload_json is not None:
            stored.payload_json = spec.payload_json
        if spec.result_json is not None:
            stored.result_json = spec.result_json
        if spec.error is not None:
            stored.error = spec.error
        stored.version += 1
        stored.updated_at = created_us(now) / 1_000_000
        if spec.ttl_seconds is not None:
            stored.expires_at = now + spec.ttl_seconds
            self._schedule(stored.expires_at, job_id)
        return stored.record(job_id)

    async def _delete(self, job_id: str) -> bool:
        self._purge()
        stored = self._records.pop(job_id, None)
        if stored is None:
            return False
        self._index_remove(owner_bucket(stored.owner_oid), member(stored.created_us, job_id))
        return True

    async def _exists(self, job_id: str) -> bool:
        self._purge()
        return job_id in self._records

    async def _list_ids(self, limit: int) -> list[str]:
        self._purge()
        return [job_id for job_id, _ in zip(self._records, range(limit), strict=False)]

    async def _count_hint(self) -> int | None:
        return len(self._records)

    async def _ping(self) -> bool:
        return True

    async def _close(self) -> None:
        return None

    # -- expiry --------------------------------------------------------------
    def _schedule(self, expires_at: float, job_id: str) -> None:
        heapq.heappush(self._expiry, (expires_at, job_id))
        if len(self._expiry) > 2 * len(self._records) + 64:  # TTL resets leave old entries
            self._expiry = [(s.expires_at, j) for j, s in self._records.items()]
            heapq.heapify(self._expiry)

    def _purge(self) -> float:
        """Drop every record whose TTL has passed (and its index entry); returns now."""
        now = self._now()
        while self._expiry and self._expiry[0][0] <= now:
            _, job_id = heapq.heappop(self._expiry)
            stored = self._records.get(job_id)
            if stored is not None and stored.expires_at <= now:
                del self._records[job_id]
                self._index_remove(
                    owner_bucket(stored.owner_oid), member(stored.created_us, job_id)
                )
        return now

    # -- index primitives ----------------------------------------------------
    def _index_has(self, bucket: str, index_member: str) -> bool:
        members = self._index.get(bucket, [])
        at = bisect_left(members, index_member)
        return at < len(members) and members[at] == index_member

    def _index_add(self, bucket: str, index_member: str) -> None:
        if not self._index_has(bucket, index_member):
            insort(self._index.setdefault(bucket, []), index_member)

    def _index_remove(self, bucket: str, index_member: str) -> bool:
        if not self._index_has(bucket, index_member):
            return False
        members = self._index[bucket]
        del members[bisect_left(members, index_member)]
        if not members:
            del self._index[bucket]
        return True

    def _row(self, job_id: str, include_payload: bool = True) -> Row | None:
        stored = self._records.get(job_id)
        if stored is None:
            return None
        return stored.record(job_id, include_payload), member(stored.created_us, job_id)

    async def _index_read(
        self, buckets: Sequence[str], before: str | None, count: int
    ) -> list[list[str]]:
        self._purge()
        pages = []
        for bucket in buckets:
            members = self._index.get(bucket, [])
            end = len(members) if before is None else bisect_left(members, before)
            pages.append(members[max(0, end - count) : end][::-1])
        return pages

    async def _fetch_rows(self, job_ids: Sequence[str], include_payload: bool) -> list[Row | None]:
        self._purge()
        return [self._row(job_id, include_payload) for job_id in job_ids]

    async def _index_repair(self, entries: Sequence[tuple[str, str]]) -> int:
        return sum(self._repair_one(bucket, m) for bucket, m in entries)

    def _repair_one(self, bucket: str, index_member: str) -> bool:
        row = self._row(index_member[17:], include_payload=False)
        if row is not None and row[1] == index_member and owner_bucket(row[0].owner_oid) == bucket:
            return False
        return self._index_remove(bucket, index_member)

    async def _legacy_members(self, buckets: Sequence[str], cap: int) -> list[str]:
        self._purge()
        visible = set(buckets)
        found: list[str] = []
        for job_id, stored in self._records.items():
            if len(found) >= cap:
                break
            if owner_bucket(stored.owner_oid) in visible:
                found.append(member(stored.created_us, job_id))
        return found

    async def _backfill(
        self, dry_run: bool, batch: int, progress: Callable[[int], None] | None
    ) -> BackfillReport:
        report = BackfillReport(dry_run=dry_run)
        job_ids = list(self._records)
        for start in range(0, len(job_ids), batch):
            self._purge()
            for job_id in job_ids[start : start + batch]:
                report.scanned += 1
                stored = self._records.get(job_id)
                if stored is None:
                    report.skipped += 1
                    continue
                bucket, entry = owner_bucket(stored.owner_oid), member(stored.created_us, job_id)
                if self._index_has(bucket, entry):
                    report.present += 1
                else:
                    report.added += 1
                    if not dry_run:
                        self._index_add(bucket, entry)
            if progress is not None:
                progress(report.scanned)
            await asyncio.sleep(0)  # let traffic through between batches
        return report

    async def _sweep(self, max_entries: int) -> int:
        self._purge()
        entries: list[tuple[str, str]] = []
        bucket_from, member_from = self._sweep_position
        for bucket in sorted(b for b in self._index if b >= bucket_from):
            members = self._index[bucket]
            start = bisect_left(members, member_from) if bucket == bucket_from else 0
            entries += [(bucket, m) for m in members[start : start + max_entries - len(entries)]]
            if len(entries) >= max_entries:
                break
        if len(entries) >= max_entries:
            last_bucket, last_member = entries[-1]
            self._sweep_position = (last_bucket, last_member + "\0")
        else:
            self._sweep_position = ("", "")
        return await self._index_repair(entries)

    def debug_index(self) -> dict[str, list[str]]:
        """A copy of the index (for tests and admin checks)."""
        return {bucket: list(members) for bucket, members in self._index.items()}
