"""RedisJobStore: one HASH per job, create/update/delete as Lua scripts, TTL in the same step.

Layout (keys.StoreKeys): `agentjobs:{agent}:<job_id>` with fields status, payload
(JSON), result (JSON, absent when None), error (absent when None), created_at and
updated_at (seconds from Redis TIME, "<sec>.<usec>"), version, owner_oid. The time
index of an owner is `agentjobs:{agent}:_idx:<bucket>` in the same slot, so create
writes record and index entry in one script, on Redis Cluster too.

Connections: one client (connection pool) per Redis URL and event loop, created lazily
on first use and shared by every store of the process; `close()` releases this
store's share and the last one out closes the pool.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .connection import RedisClient, RedisSettings
from .errors import (
    BackendUnavailable,
    IllegalTransition,
    InvalidRecord,
    JobConflict,
    JobNotFound,
    VersionConflict,
)
from .keys import SHARED_OWNER_BUCKET, StoreKeys
from .listing import BackfillReport, Row
from .record import JobRecord
from .scripts import LuaScript, lua_source
from .status import JobStatus, transition_allowed
from .store import DEFAULT_AGENT, BaseJobStore, UpdateSpec
from .time_index import DEFAULT_LIST_SCAN_CAP, created_us, job_id_of, member, owner_bucket

__all__ = ["RedisJobStore", "parse_hash"]

logger = logging.getLogger("platform_common.jobs.redis_store")

_SCRIPTS = ("store_create", "store_update", "store_delete", "store_index_repair",
            "store_index_backfill")  # fmt: skip
_ROW_FIELDS = ("status", "payload", "result", "error", "created_at", "updated_at", "version",
               "owner_oid")  # fmt: skip
_KNOWN_FIELDS = frozenset(_ROW_FIELDS)
_REQUIRED_FIELDS = frozenset({"status", "payload", "created_at", "updated_at", "version"})
_REDIS_TIME = re.compile(r"(\d+)\.(\d{6})")
_SCAN_COUNT = 1000


# -- shared clients ------------------------------------------------------------
@dataclass(slots=True)
class _Shared:
    client: RedisClient
    users: int = 0


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[RedisSettings, _Shared]] = (
    weakref.WeakKeyDictionary()
)


def _acquire(settings: RedisSettings) -> RedisClient:
    per_loop = _shared.setdefault(asyncio.get_running_loop(), {})
    entry = per_loop.get(settings)
    if entry is None:
        entry = per_loop[settings] = _Shared(settings.make_client())
    entry.users += 1
    return entry.client


async def _release(settings: RedisSettings, loop: asyncio.AbstractEventLoop) -> None:
    per_loop = _shared.get(loop, {})
    entry = per_loop.get(settings)
    if entry is None:
        return
    entry.users -= 1
    if entry.users <= 0:
        del per_loop[settings]
        if loop is asyncio.get_running_loop():
            await entry.client.aclose()
        # A client of another (finished) loop cannot be closed from here; dropping
        # the last reference lets its sockets go with that loop.


@dataclass(slots=True)
class _Binding:
    """A store's client and scripts for one event loop."""

    client: RedisClient
    scripts: dict[str, LuaScript] = field(default_factory=dict)

    def script(self, name: str) -> LuaScript:
        script = self.scripts.get(name)
        if script is None:
            script = self.scripts[name] = LuaScript(self.client, name)
        return script


@cache
def _script_sha(name: str) -> str:
    return hashlib.sha1(lua_source(name).encode()).hexdigest()


@cache
def _allowed_from(requested: JobStatus) -> str:
    """The statuses `requested` may be reached from, as the update script reads them."""
    return "," + ",".join(s.value for s in JobStatus if transition_allowed(s, requested)) + ","


class RedisJobStore(BaseJobStore):
    """The redis:// / rediss:// backend. Pass `client` to use a client you own and close."""

    db_system = "redis"

    def __init__(
        self,
        settings: RedisSettings | str,
        *,
        agent: str = DEFAULT_AGENT,
        time_index: bool = False,
        list_scan_cap: int = DEFAULT_LIST_SCAN_CAP,
        client: RedisClient | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        super().__init__(
            agent=agent,
            time_index=time_index,
            list_scan_cap=list_scan_cap,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        if isinstance(settings, str):
            settings = RedisSettings.from_url(settings, setting_name="JOB_STORE_URL")
        self.settings = settings
        self.keys = StoreKeys(self.agent)
        self._own_client = client
        self._bindings: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Binding] = (
            weakref.WeakKeyDictionary()
        )
        self._sweep_position: tuple[str, str] = ("", "")

    def __repr__(self) -> str:
        return f"RedisJobStore({self.settings.redacted_url()!r}, agent={self.agent!r})"

    def _binding(self) -> _Binding:
        loop = asyncio.get_running_loop()
        binding = self._bindings.get(loop)
        if binding is None:
            client = self._own_client or _acquire(self.settings)
            binding = self._bindings[loop] = _Binding(client)
        return binding

    @contextmanager
    def _unavailable(self) -> Iterator[None]:
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise BackendUnavailable(
                f"Redis at {self.settings.redacted_url()} unreachable: {type(exc).__name__}: {exc}"
            ) from exc

    # -- verbs -------------------------------------------------------------
    async def _create(
        self, job_id: str, payload_json: str, ttl: int, status: JobStatus, owner_oid: str
    ) -> JobRecord:
        keys = [self.keys.record(job_id)]
        if self.time_index:
            keys.append(self.keys.index(owner_bucket(owner_oid)))
        with self._unavailable():
            reply = await self._binding().script("store_create")(
                keys, [status.value, payload_json, ttl, owner_oid, job_id]
            )
        if reply[0] == "conflict":
            raise JobConflict(job_id)
        created = float(reply[1])
        return JobRecord(
            job_id=job_id,
            status=status,
            payload=json.loads(payload_json),
            created_at=created,
            updated_at=created,
            version=1,
            owner_oid=owner_oid,
        )

    async def _get(self, job_id: str) -> JobRecord | None:
        with self._unavailable():
            fields = await self._binding().client.hgetall(self.keys.record(job_id))  # type: ignore[misc]
        return parse_hash(job_id, fields)[0] if fields else None

    async def _update(self, job_id: str, spec: UpdateSpec) -> JobRecord:
        args = [
            "" if spec.status is None else spec.status.value,
            "" if spec.status is None else _allowed_from(spec.status),
            spec.payload_json or "",
            spec.result_json or "",
            "" if spec.error is None else "=" + spec.error,
            "" if spec.ttl_seconds is None else spec.ttl_seconds,
            "" if spec.expected_version is None else spec.expected_version,
        ]
        with self._unavailable():
            reply = await self._binding().script("store_update")([self.keys.record(job_id)], args)
        outcome = reply[0]
        if outcome == "ok":
            return parse_hash(job_id, dict(zip(reply[1::2], reply[2::2], strict=True)))[0]
        if outcome == "missing":
            raise JobNotFound(job_id)
        if outcome == "version":
            assert spec.expected_version is not None
            raise VersionConflict(job_id, spec.expected_version, int(reply[1]))
        if outcome == "illegal" and reply[1] in JobStatus._value2member_map_:
            assert spec.status is not None
            raise IllegalTransition(job_id, reply[1], spec.status.value)
        field_name = reply[1] if outcome == "malformed" else "status"
        raise InvalidRecord(field_name, f"stored record of job {job_id!r} is malformed")

    async def _delete(self, job_id: str) -> bool:
        record_key = self.keys.record(job_id)
        with self._unavailable():
            binding = self._binding()
            if not self.time_index:
                return bool(await binding.script("store_delete")([record_key], ["", job_id]))
            for _ in range(5):  # -1: re-created with another owner between our two steps
                owner = await binding.client.hget(record_key, "owner_oid")  # type: ignore[misc]
                if owner is None and not await binding.client.exists(record_key):
                    return False
                owner = owner or ""
                index_key = self.keys.index(owner_bucket(owner))
                deleted = await binding.script("store_delete")(
                    [record_key, index_key], [owner, job_id]
                )
                if deleted >= 0:
                    return bool(deleted)
        raise BackendUnavailable(f"delete of job {job_id!r} kept racing with re-creates")

    async def _exists(self, job_id: str) -> bool:
        with self._unavailable():
            return bool(await self._binding().client.exists(self.keys.record(job_id)))

    async def _list_ids(self, limit: int) -> list[str]:
        ids: list[str] = []
        with self._unavailable():
            async for key in self._record_keys():
                ids.append(self.keys.job_id_of(key))
                if len(ids) >= limit:
                    break
        return ids

    async def _ping(self) -> bool:
        with self._unavailable():
            return bool(await self._binding().client.ping())  # type: ignore[misc]

    async def _close(self) -> None:
        bindings = list(self._bindings.items())
        self._bindings.clear()
        if self._own_client is None:
            for loop, _ in bindings:
                await _release(self.settings, loop)

    async def _record_keys(self) -> AsyncIterator[str]:
        client = self._binding().client
        async for key in client.scan_iter(match=self.keys.scan_pattern(), count=_SCAN_COUNT):
            if self.keys.is_record_key(key):
                yield key

    # -- index primitives ----------------------------------------------------
    async def _index_read(
        self, buckets: Sequence[str], before: str | None, count: int
    ) -> list[list[str]]:
        high = "+" if before is None else "(" + before
        with self._unavailable():
            async with self._binding().client.pipeline(transaction=False) as pipe:
                for bucket in buckets:
                    pipe.zrevrangebylex(self.keys.index(bucket), high, "-", start=0, num=count)
                return list(await pipe.execute())

    async def _fetch_rows(self, job_ids: Sequence[str], include_payload: bool) -> list[Row | None]:
        fields = list(_ROW_FIELDS if include_payload else _ROW_FIELDS[:1] + _ROW_FIELDS[2:])
        with self._unavailable():
            async with self._binding().client.pipeline(transaction=False) as pipe:
                for job_id in job_ids:
                    pipe.hmget(self.keys.record(job_id), fields)
                replies = await pipe.execute()
        rows: list[Row | None] = []
        for job_id, values in zip(job_ids, replies, strict=True):
            found = {
                name: value for name, value in zip(fields, values, strict=True) if value is not None
            }
            if not found:
                rows.append(None)
                continue
            if not include_payload:
                found["payload"] = "null"
            try:
                rows.append(parse_hash(job_id, found))
            except InvalidRecord as exc:
                logger.warning("skipping malformed record %r in a listing: %s", job_id, exc)
                rows.append(None)
        return rows

    async def _index_repair(self, entries: Sequence[tuple[str, str]]) -> int:
        by_bucket: dict[str, list[str]] = {}
        for bucket, index_member in entries:
            by_bucket.setdefault(bucket, []).append(index_member)
        calls = [
            (
                [self.keys.index(bucket), *(self.keys.record(job_id_of(m)) for m in members)],
                ["" if bucket == SHARED_OWNER_BUCKET else bucket, *members],
            )
            for bucket, members in by_bucket.items()
        ]
        with self._unavailable():
            return sum(await self._script_batch("store_index_repair", calls))

    async def _script_batch(self, name: str, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run one script many times in one pipeline (one round trip); NOSCRIPT reloads.

        redis-py refuses EVALSHA in a cluster pipeline: there, the calls go one by one."""
        binding = self._binding()
        client = binding.client
        if isinstance(client, RedisCluster):
            script = binding.script(name)
            return [await script(keys, args) for keys, args in calls]
        sha = _script_sha(name)
        for attempt in range(2):
            try:
                async with client.pipeline(transaction=False) as pipe:
                    for keys, args in calls:
                        pipe.evalsha(sha, len(keys), *keys, *args)
                    return list(await pipe.execute())
            except NoScriptError:
                if attempt:
                    raise
                await client.script_load(lua_source(name))
        raise AssertionError("unreachable")

    async def _legacy_members(self, buckets: Sequence[str], cap: int) -> list[str]:
        visible = set(buckets)
        members: list[str] = []
        with self._unavailable():
            batch: list[str] = []
            scanned = 0
            async for key in self._record_keys():
                batch.append(key)
                scanned += 1
                if len(batch) >= _SCAN_COUNT or scanned >= cap:
                    members += await self._visible_members(batch, visible)
                    batch = []
                if scanned >= cap:
                    break
            if batch:
                members += await self._visible_members(batch, visible)
        return members

    async def _visible_members(self, record_keys: list[str], visible: set[str]) -> list[str]:
        async with self._binding().client.pipeline(transaction=False) as pipe:
            for key in record_keys:
                pipe.hmget(key, ["owner_oid", "created_at"])
            replies = await pipe.execute()
        members = []
        for key, (owner, created) in zip(record_keys, replies, strict=True):
            if created is not None and owner_bucket(owner or "") in visible:
                exact = _exact_us(created)
                if exact is not None:
                    members.append(member(exact, self.keys.job_id_of(key)))
        return members

    async def _backfill(
        self, dry_run: bool, batch: int, progress: Callable[[int], None] | None
    ) -> BackfillReport:
        report = BackfillReport(dry_run=dry_run)
        with self._unavailable():
            keys: list[str] = []
            async for key in self._record_keys():
                keys.append(key)
                if len(keys) >= batch:
                    await self._backfill_batch(keys, dry_run, report)
                    keys = []
                    if progress is not None:
                        progress(report.scanned)
            if keys:
                await self._backfill_batch(keys, dry_run, report)
                if progress is not None:
                    progress(report.scanned)
        return report

    async def _backfill_batch(
        self, record_keys: list[str], dry_run: bool, report: BackfillReport
    ) -> None:
        binding = self._binding()
        async with binding.client.pipeline(transaction=False) as pipe:
            for key in record_keys:
                pipe.hget(key, "owner_oid")
            owners = await pipe.execute()
        flag = "1" if dry_run else "0"
        outcomes = await self._script_batch(
            "store_index_backfill",
            [
                (
                    [key, self.keys.index(owner_bucket(owner or ""))],
                    [owner or "", self.keys.job_id_of(key), flag],
                )
                for key, owner in zip(record_keys, owners, strict=True)
            ],
        )
        for key, outcome in zip(record_keys, outcomes, strict=True):
            report.scanned += 1
            if outcome == 1:
                report.added += 1
            elif outcome == 0:
                report.present += 1
            else:
                report.skipped += 1
                if outcome == -2 and len(report.malformed) < 100:
                    report.malformed.append(self.keys.job_id_of(key))

    async def _sweep(self, max_entries: int) -> int:
        client = self._binding().client
        removed = examined = 0
        with self._unavailable():
            pattern = self.keys.index_scan_pattern()
            index_keys = sorted(
                [k async for k in client.scan_iter(match=pattern, count=_SCAN_COUNT)]
            )
            key_from, member_from = self._sweep_position
            for key in (k for k in index_keys if k >= key_from):
                low = "[" + member_from if key == key_from and member_from else "-"
                while examined < max_entries:
                    members = await client.zrangebylex(
                        key, low, "+", start=0, num=min(500, max_entries - examined)
                    )
                    if not members:
                        break
                    examined += len(members)
                    bucket = self.keys.bucket_of(key)
                    removed += await self._index_repair([(bucket, m) for m in members])
                    low = "(" + members[-1]
                    self._sweep_position = (key, members[-1] + "\0")
                if examined >= max_entries:
                    return removed
            self._sweep_position = ("", "")  # a whole pass done: the next sweep starts over
        return removed


def parse_hash(job_id: str, fields: dict[str, str]) -> Row:
    """A stored hash as (JobRecord, index member). Anything malformed raises InvalidRecord
    naming the field, so no half-read record ever leaves the store."""
    names = fields.keys()
    if not names >= _REQUIRED_FIELDS or not names <= _KNOWN_FIELDS:
        unknown = sorted(names - _KNOWN_FIELDS)
        name = unknown[0] if unknown else sorted(_REQUIRED_FIELDS - names)[0]
        raise InvalidRecord(name, f"job {job_id!r}: {'unknown' if unknown else 'missing'} field")
    try:
        status = JobStatus(fields["status"])
    except ValueError:
        raise InvalidRecord("status", f"job {job_id!r}: unknown status") from None
    raw_result = fields.get("result")
    created_raw = fields["created_at"]
    created = _number(job_id, "created_at", created_raw, float)
    record = JobRecord(
        job_id=job_id,
        status=status,
        payload=_json_object(job_id, "payload", fields["payload"]),
        result=None if raw_result is None else _json_object(job_id, "result", raw_result),
        error=fields.get("error"),
        created_at=created,
        updated_at=_number(job_id, "updated_at", fields["updated_at"], float),
        version=_number(job_id, "version", fields["version"], int),
        owner_oid=fields.get("owner_oid", ""),
    )
    if record.version < 1:
        raise InvalidRecord("version", f"job {job_id!r}: must be >= 1")
    exact = _exact_us(created_raw)
    return record, member(created_us(created) if exact is None else exact, job_id)


def _json_object(job_id: str, name: str, value: str) -> Any:
    try:
        decoded = json.loads(value)
    except ValueError:
        raise InvalidRecord(name, f"job {job_id!r}: stored value is not JSON") from None
    if decoded is not None and not isinstance(decoded, dict):
        raise InvalidRecord(name, f"job {job_id!r}: stored value is not a JSON object")
    return decoded


def _number(job_id: str, name: str, value: str, kind: Callable[[str], Any]) -> Any:
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number):
        raise InvalidRecord(name, f"job {job_id!r}: stored value {value[:40]!r} is not a number")
    return number


def _exact_us(created_at: str) -> int | None:
    """Microseconds of a "<sec>.<usec>" timestamp written by the scripts, exactly."""
    match = _REDIS_TIME.fullmatch(created_at)
    return None if match is None else int(match[1]) * 1_000_000 + int(match[2])
