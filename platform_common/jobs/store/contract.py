"""The JobStore contract (a Protocol) and the behaviour every backend shares.

`BaseJobStore` validates arguments, encodes JSON once, wraps every verb in telemetry
and leaves only the storage primitives (`_create`, `_get`, ...) to a backend, so
memory:// and redis:// cannot drift apart in what they accept or report.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypedDict, runtime_checkable

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ..errors import IllegalTransition, JobsError, ValidationError, VersionConflict
from ..status import JobStatus, transition_allowed
from ..validation import (
    encode_json,
    is_int,
    validate_job_id,
    validate_name,
    validate_owner_oid,
    validate_text,
    validate_ttl,
)
from .listing import BackfillReport, IndexBackend, Page, list_page
from .record import JobRecord
from .telemetry import StoreTelemetry
from .time_index import DEFAULT_LIST_SCAN_CAP

if TYPE_CHECKING:
    pass  # typing.Unpack of kwargs is Python 3.12+

__all__ = [
    "DEFAULT_AGENT",
    "MAX_LIST_IDS",
    "MAX_PAGE_LIMIT",
    "BaseJobStore",
    "JobStore",
    "StoreOptions",
    "UpdateSpec",
]

logger = logging.getLogger("platform_common.jobs.store.contract")

DEFAULT_AGENT = "default-agent"
MAX_LIST_IDS = 10_000
MAX_PAGE_LIMIT = 1_000


@runtime_checkable
class JobStore(Protocol):
    """What every backend offers (create, get, update, delete with TTLs, plus owners and paging)."""

    async def create(
        self,
        job_id: str,
        payload: dict[str, Any] | None = None,
        *,
        ttl_seconds: int,
        status: JobStatus = JobStatus.PENDING,
        owner_oid: str = "",
    ) -> JobRecord: ...

    async def get(self, job_id: str) -> JobRecord | None: ...

    async def update(
        self,
        job_id: str,
        *,
        status: JobStatus | None = None,
        payload: dict[str, Any] | None = None,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        ttl_seconds: int | None = None,
        expected_version: int | None = None,
    ) -> JobRecord: ...

    async def delete(self, job_id: str) -> bool: ...

    async def exists(self, job_id: str) -> bool: ...

    async def list_ids(self, *, limit: int = 100) -> list[str]: ...

    async def list_for_owner(
        self,
        owner_oid: str,
        *,
        limit: int = 20,
        cursor: str | None = None,
        include_payload: bool = False,
    ) -> Page: ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class UpdateSpec:
    """A validated update: JSON already encoded, None meaning "leave as it is"."""

    status: JobStatus | None
    payload_json: str | None
    result_json: str | None
    error: str | None
    ttl_seconds: int | None
    expected_version: int | None

    def check(self, job_id: str, version: int, status: JobStatus) -> None:
        """VersionConflict or IllegalTransition when this update may not be written over a
        record at `version` in `status` (a backend asks before it writes)."""
        if self.expected_version is not None and version != self.expected_version:
            raise VersionConflict(job_id, self.expected_version, version)
        if self.status is not None and not transition_allowed(status, self.status):
            raise IllegalTransition(job_id, status.value, self.status.value)


class StoreOptions(TypedDict, total=False):
    """The keyword arguments every backend takes (BaseJobStore's, with its defaults)."""

    agent: str
    time_index: bool
    index_writes: bool
    index_reads: bool
    list_scan_cap: int
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None


class BaseJobStore(IndexBackend, ABC):
    """Validation, JSON encoding and telemetry, once for every backend."""

    db_system: ClassVar[str]

    def __init__(
        self,
        *,
        agent: str = DEFAULT_AGENT,
        time_index: bool = False,
        index_writes: bool = False,
        index_reads: bool = False,
        list_scan_cap: int = DEFAULT_LIST_SCAN_CAP,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.agent = validate_name(agent, "agent")
        # time_index=True is the former single switch: both on.
        self.index_writes = bool(index_writes or time_index)
        self.index_reads = bool(index_reads or time_index)
        if self.index_reads and not self.index_writes:
            raise ValidationError(
                "index_reads", "needs index_writes (an index nobody writes misses new jobs)"
            )
        if not is_int(list_scan_cap) or list_scan_cap < 1:
            raise ValidationError("list_scan_cap", "must be a positive int")
        self.list_scan_cap = list_scan_cap
        self.telemetry = StoreTelemetry(
            db_system=self.db_system,
            agent=self.agent,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )

    @property
    def time_index(self) -> bool:
        """Both index switches on (the former single switch; setting it sets both)."""
        return self.index_writes and self.index_reads

    @time_index.setter
    def time_index(self, enabled: bool) -> None:
        self.index_writes = self.index_reads = bool(enabled)

    # -- the contract ----------------------------------------------------------
    async def create(
        self,
        job_id: str,
        payload: dict[str, Any] | None = None,
        *,
        ttl_seconds: int,
        status: JobStatus = JobStatus.PENDING,
        owner_oid: str = "",
    ) -> JobRecord:
        """Store a new job; JobConflict if the id exists. TTL is required (no leaks).

        Bounds (validation.py, the same for every backend, checked before anything is
        written): ttl_seconds from 1 to MAX_TTL_SECONDS; the payload's JSON at most
        MAX_JSON_DEPTH containers deep and MAX_JSON_BYTES encoded, string keys at every
        level; no lone surrogates."""
        with self.telemetry.operation("create") as op:
            job_id = validate_job_id(job_id)
            op.job(job_id)
            ttl = validate_ttl(ttl_seconds)
            status = _status(status, "status")
            owner = validate_owner_oid(owner_oid)
            return await self._create(job_id, _json_object(payload, "payload"), ttl, status, owner)

    async def get(self, job_id: str) -> JobRecord | None:
        """The job, or None if it does not exist (or has expired)."""
        with self.telemetry.operation("get") as op:
            job_id = validate_job_id(job_id)
            op.job(job_id)
            record = await self._get(job_id)
            if record is None:
                op.outcome = "not_found"
            return record

    async def update(
        self,
        job_id: str,
        *,
        status: JobStatus | None = None,
        payload: dict[str, Any] | None = None,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        ttl_seconds: int | None = None,
        expected_version: int | None = None,
    ) -> JobRecord:
        """Change the given fields (None = unchanged) and bump the version, atomically.

        The remaining TTL is kept unless `ttl_seconds` is given, which resets it.
        JobNotFound if missing; VersionConflict if `expected_version` differs from the
        stored version; IllegalTransition (nothing written) for e.g. succeeded -> running.
        payload and result have create's bounds; error is text of at most MAX_TEXT_BYTES.
        """
        with self.telemetry.operation("update") as op:
            job_id = validate_job_id(job_id)
            op.job(job_id)
            if error is not None:
                if not isinstance(error, str):
                    problem = f"must be a string or None, got {type(error).__name__}"
                    raise ValidationError("error", problem)
                validate_text(error, "error")
            if expected_version is not None and (
                not is_int(expected_version) or expected_version < 1
            ):
                raise ValidationError("expected_version", "must be a positive int or None")
            spec = UpdateSpec(
                status=None if status is None else _status(status, "status"),
                payload_json=None if payload is None else _json_object(payload, "payload"),
                result_json=None if result is None else _json_object(result, "result"),
                error=error,
                ttl_seconds=None if ttl_seconds is None else validate_ttl(ttl_seconds),
                expected_version=expected_version,
            )
            return await self._update(job_id, spec)

    async def delete(self, job_id: str) -> bool:
        """Remove the job (and its index entry): True if it existed. This is the soft-delete
        the time index knows: a deleted job leaves every listing at once."""
        with self.telemetry.operation("delete") as op:
            job_id = validate_job_id(job_id)
            op.job(job_id)
            deleted = await self._delete(job_id)
            if not deleted:
                op.outcome = "not_found"
            return deleted

    async def exists(self, job_id: str) -> bool:
        with self.telemetry.operation("exists") as op:
            job_id = validate_job_id(job_id)
            op.job(job_id)
            return await self._exists(job_id)

    async def list_ids(self, *, limit: int = 100) -> list[str]:
        """Up to `limit` job ids, in no particular order (debug endpoints only)."""
        with self.telemetry.operation("list_ids"):
            return await self._list_ids(_limit(limit, MAX_LIST_IDS))

    async def list_for_owner(
        self,
        owner_oid: str,
        *,
        limit: int = 20,
        cursor: str | None = None,
        include_payload: bool = False,
    ) -> Page:
        """The newest jobs visible to `owner_oid` (theirs and shared ones), newest first.

        Pass `page.next_cursor` back to get the next page; None means the end. With
        index reads on this reads O(limit) index entries; otherwise (or when the index
        read fails or is empty) it falls back to the bounded legacy scan.
        Rows carry payload=None unless `include_payload`.
        """
        with self.telemetry.operation("list_for_owner"):
            owner = validate_owner_oid(owner_oid)
            return await list_page(
                self, owner, _limit(limit, MAX_PAGE_LIMIT), cursor, bool(include_payload)
            )

    async def backfill_time_index(
        self,
        *,
        dry_run: bool = False,
        batch: int = 500,
        progress: Callable[[int], None] | None = None,
    ) -> BackfillReport:
        """Upsert an index entry for every live record (idempotent; safe under traffic);
        `progress` is told the number of records scanned so far after each batch."""
        with self.telemetry.operation("backfill_time_index"):
            return await self._backfill(dry_run, _limit(batch, MAX_LIST_IDS, "batch"), progress)

    async def sweep_time_index(self, *, max_entries: int = 1000) -> int:
        """Examine at most `max_entries` index entries, oldest first, continuing where the
        previous sweep stopped, and remove those whose record is gone. Returns removed."""
        with self.telemetry.operation("sweep_time_index"):
            return await self._sweep(_limit(max_entries, 1_000_000, "max_entries"))

    async def sweep_forever(self, *, every_seconds: float = 60.0, max_entries: int = 1000) -> None:
        """Run `sweep_time_index` every `every_seconds` until cancelled (start it as a
        task in the app's lifespan). A failed sweep is logged and retried next time."""
        if not every_seconds > 0:
            raise ValidationError("every_seconds", "must be positive")
        while True:
            await asyncio.sleep(every_seconds)
            try:
                removed = await self.sweep_time_index(max_entries=max_entries)
            except JobsError as exc:
                logger.warning("time index sweep failed for agent %s: %s", self.agent, exc)
            else:
                if removed:
                    logger.info("time index sweep removed %d dangling entries", removed)
            # On Python 3.11 a cancel that lands inside redis-py's `asyncio.timeout(0)`
            # connection check can be turned into a TimeoutError and swallowed there;
            # the request is still pending on the task, so honour it here.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError

    async def record_count_hint(self) -> int | None:
        """A cheap upper bound of the records stored (for progress bars), or None."""
        return await self._count_hint()

    async def ping(self) -> bool:
        """Health check for startup/readiness: True, or BackendUnavailable."""
        with self.telemetry.operation("ping"):
            return await self._ping()

    async def close(self) -> None:
        with self.telemetry.operation("close"):
            await self._close()

    # -- what a backend provides ---------------------------------------------
    @abstractmethod
    async def _create(
        self, job_id: str, payload_json: str, ttl: int, status: JobStatus, owner_oid: str
    ) -> JobRecord: ...

    @abstractmethod
    async def _get(self, job_id: str) -> JobRecord | None: ...

    @abstractmethod
    async def _update(self, job_id: str, spec: UpdateSpec) -> JobRecord: ...

    @abstractmethod
    async def _delete(self, job_id: str) -> bool: ...

    @abstractmethod
    async def _exists(self, job_id: str) -> bool: ...

    @abstractmethod
    async def _list_ids(self, limit: int) -> list[str]: ...

    @abstractmethod
    async def _backfill(
        self, dry_run: bool, batch: int, progress: Callable[[int], None] | None
    ) -> BackfillReport: ...

    @abstractmethod
    async def _sweep(self, max_entries: int) -> int: ...

    @abstractmethod
    async def _count_hint(self) -> int | None: ...

    @abstractmethod
    async def _ping(self) -> bool: ...

    @abstractmethod
    async def _close(self) -> None: ...


def _status(value: object, field: str) -> JobStatus:
    try:
        return JobStatus(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(s.value for s in JobStatus)
        raise ValidationError(field, f"must be one of {allowed}, got {value!r}") from None


def _json_object(value: object, field: str) -> str:
    """Encode a payload or result: a dict (or None) within create()'s bounds, no NaN."""
    if value is not None and not isinstance(value, dict):
        raise ValidationError(field, f"must be a dict or None, got {type(value).__name__}")
    return encode_json(value, field)


def _limit(value: object, maximum: int, field: str = "limit") -> int:
    if not is_int(value) or not 1 <= value <= maximum:
        raise ValidationError(field, f"must be an int from 1 to {maximum}, got {value!r}")
    return value
