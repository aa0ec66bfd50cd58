"""RedisJobStore: one HASH per job, create/update/delete as Lua scripts, TTL in the same step.

Layout (keys.StoreKeys): `agentjobs:{agent}:<job_id>` with fields status, payload
(JSON), result (JSON, absent when None), error (absent when None), created_at and
updated_at (seconds from Redis TIME, "<sec>.<usec>"), version, owner_oid; fields a
newer version adds are read past and kept. The time index of an owner is
`agentjobs:{agent}:_idx:<bucket>` in the same slot, so create writes record and index
entry in one script, on Redis Cluster too. Redis keeps what a failing script wrote,
so every script checks all that can fail before its first write: the update script
judges the whole stored record by parse_hash's rules first (in one round trip), and
leaves the few it cannot judge to be parsed here before it writes to that very version.

Connections: one client (connection pool) per Redis URL and event loop, created lazily
on first use and shared by every store of the process; `close()` releases this
store's share and the last one out closes the pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import (
    BackendUnavailable,
    IllegalTransition,
    InvalidRecord,
    JobConflict,
    JobNotFound,
    ValidationError,
    VersionConflict,
)
from ..keys import StoreKeys
from ..redis.url import RedisClient, RedisSettings
from ..status import JobStatus, transition_allowed
from .contract import BaseJobStore, StoreOptions, UpdateSpec
from .record import JobRecord
from .record_hash import is_wrong_type, parse_hash
from .redis_index import Binding, IndexSkipLog, RedisTimeIndex
from .time_index import owner_bucket

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RedisJobStore"]

# Reads of a record the update script leaves to Python (_update_parsed_here): enough for
# every writer of a busy job; past it the job is rewritten faster than we can read it.
_UPDATE_ATTEMPTS = 50
# store_update.lua's status arguments (",a,b,"), computed once from the enum and its rule.
_KNOWN_STATUSES = f",{','.join(status.value for status in JobStatus)},"
_ALLOWED_FROM = {
    target: f",{','.join(s.value for s in JobStatus if transition_allowed(s, target))},"
    for target in JobStatus
}


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


class RedisJobStore(RedisTimeIndex, BaseJobStore):
    """The redis:// / rediss:// backend. Pass `client` to use a client you own and close."""

    db_system = "redis"

    def __init__(
        self,
        settings: RedisSettings | str,
        *,
        client: RedisClient | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(**options)
        if isinstance(settings, str):
            settings = RedisSettings.from_url(settings, setting_name="JOB_STORE_URL")
        self.settings = settings
        self.keys = StoreKeys(self.agent)
        self._own_client = client
        self._bindings: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Binding] = (
            weakref.WeakKeyDictionary()
        )
        self._sweep_position: tuple[str, str] = ("", "")
        self._index_skip_log = IndexSkipLog(self.agent)

    def __repr__(self) -> str:
        return f"RedisJobStore({self.settings.redacted_url()!r}, agent={self.agent!r})"

    def _binding(self) -> Binding:
        loop = asyncio.get_running_loop()
        binding = self._bindings.get(loop)
        if binding is None:
            client = self._own_client or _acquire(self.settings)
            binding = self._bindings[loop] = Binding(client)
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
        if self.index_writes:
            keys.append(self.keys.index(owner_bucket(owner_oid)))
        with self._unavailable():
            reply = await self._binding().run(
                "store_create", keys, [status.value, payload_json, ttl, owner_oid, job_id]
            )
        if reply[0] == "conflict":
            raise JobConflict(job_id)
        if reply[0] != "ok":  # the script's own argument check: unreachable past validation
            raise ValidationError(reply[1], "refused by store_create")
        if len(reply) > 2:
            self._index_skipped("create", owner_oid)
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
        fields = await self._read_hash(job_id)
        return parse_hash(job_id, fields)[0] if fields else None

    async def _read_hash(self, job_id: str) -> dict[str, str]:
        """The record's fields ({} if there is none); InvalidRecord if its key holds
        another type or its bytes are not UTF-8 text."""
        try:
            with self._unavailable():
                return await self._binding().client.hgetall(self.keys.record(job_id))  # type: ignore[no-any-return,misc]
        except ResponseError as exc:
            if is_wrong_type(exc):
                raise InvalidRecord("record", f"job {job_id!r}: key is not a hash") from None
            raise
        except UnicodeDecodeError:
            raise InvalidRecord("record", f"job {job_id!r}: a field is not UTF-8") from None

    async def _update(self, job_id: str, spec: UpdateSpec) -> JobRecord:
        # One round trip (see the module docstring); the script answers the record as
        # written, or "check" for one it cannot judge (see its header).
        args = [
            "",
            "",
            "",
            *_changes(spec),
            _KNOWN_STATUSES,
            "" if spec.status is None else _ALLOWED_FROM[spec.status],
            "" if spec.expected_version is None else str(spec.expected_version),
        ]
        with self._unavailable():
            reply = await self._binding().run("store_update", [self.keys.record(job_id)], args)
        if reply[0] == "ok":
            return _written(job_id, spec, reply)
        if reply[0] == "check":
            return await self._update_parsed_here(job_id, spec)
        raise _refusal(job_id, spec, reply)

    async def _update_parsed_here(self, job_id: str, spec: UpdateSpec) -> JobRecord:
        """The update of a record the script left to Python: read and parse it here, then
        write only if it is still that version (compare-and-set; each lost race costs one
        more read)."""
        key = self.keys.record(job_id)
        for _ in range(_UPDATE_ATTEMPTS):
            fields = await self._read_hash(job_id)
            if not fields:
                raise JobNotFound(job_id)
            current = parse_hash(job_id, fields)[0]
            spec.check(job_id, current.version, current.status)
            version = current.version + 1
            args = [fields["version"], fields["created_at"], str(version), *_changes(spec)]
            with self._unavailable():
                reply = await self._binding().run("store_update", [key], args)
            if reply[0] == "ok":
                return _updated(current, spec, version, float(reply[1]))
            if reply[0] != "moved":
                raise _refusal(job_id, spec, reply)
        raise BackendUnavailable(
            f"update of job {job_id!r} lost {_UPDATE_ATTEMPTS} races with other writers"
        )

    async def _delete(self, job_id: str) -> bool:
        record_key = self.keys.record(job_id)
        with self._unavailable():
            binding = self._binding()
            if not self.index_writes:
                return bool(await binding.run("store_delete", [record_key], ["", job_id]))
            for _ in range(5):  # -1: re-created with another owner between our two steps
                try:
                    owner = await binding.client.hget(record_key, "owner_oid")  # type: ignore[misc]
                except (ResponseError, UnicodeDecodeError) as exc:
                    if isinstance(exc, ResponseError) and not is_wrong_type(exc):
                        raise
                    # Not a hash (or an owner that is not text): no index entry can be
                    # derived from it, so remove the key alone. An entry the record did
                    # have dangles like one whose record expired, and is repaired so.
                    return bool(await binding.run("store_delete", [record_key], ["", job_id]))
                if owner is None and not await binding.client.exists(record_key):
                    return False
                owner = owner or ""
                index_key = self.keys.index(owner_bucket(owner))
                deleted = await binding.run(
                    "store_delete", [record_key, index_key], [owner, job_id]
                )
                if deleted == 2:
                    self._index_skipped("delete", owner)
                    return True
                if deleted >= 0:
                    return bool(deleted)
        raise BackendUnavailable(f"delete of job {job_id!r} kept racing with re-creates")

    def _index_skipped(self, verb: str, owner_oid: str) -> None:
        self._index_skip_log.skipped(verb, owner_bucket(owner_oid))
        self.telemetry.index_skipped(verb)

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

    async def _count_hint(self) -> int | None:
        if isinstance(self._binding().client, RedisCluster):
            return None  # DBSIZE would need every node; the agent's keys live on one
        with self._unavailable():
            return int(await self._binding().client.dbsize())  # every key: an upper bound

    async def _ping(self) -> bool:
        with self._unavailable():
            return bool(await self._binding().client.ping())  # type: ignore[misc]

    async def _close(self) -> None:
        self._index_skip_log.flush()
        bindings = list(self._bindings.items())
        self._bindings.clear()
        if self._own_client is None:
            for loop, _ in bindings:
                await _release(self.settings, loop)


def _changes(spec: UpdateSpec) -> list[Any]:
    """ARGV[4..8] of store_update.lua: the fields to write, "" for unchanged."""
    return [
        "" if spec.status is None else spec.status.value,
        spec.payload_json or "",
        spec.result_json or "",
        "" if spec.error is None else "=" + spec.error,
        "" if spec.ttl_seconds is None else spec.ttl_seconds,
    ]


def _written(job_id: str, spec: UpdateSpec, reply: list[str | None]) -> JobRecord:
    """The record store_update.lua wrote, from its reply ("ok", updated_at, version, then
    the stored status, payload, result, error (None where the update sent none), created_at
    and owner_oid). parse_hash, like every read: the script judged the stored fields by
    its rules and the update's were validated, so it cannot fail here."""
    status, payload, result, error, created_at, owner_oid = reply[3:9]
    stored = {
        "status": status if spec.status is None else spec.status.value,
        "payload": payload if spec.payload_json is None else spec.payload_json,
        "result": result if spec.result_json is None else spec.result_json,
        "error": error if spec.error is None else spec.error,
        "created_at": created_at,
        "updated_at": reply[1],
        "version": reply[2],
        "owner_oid": owner_oid,
    }
    return parse_hash(job_id, {k: v for k, v in stored.items() if v is not None})[0]


def _refusal(job_id: str, spec: UpdateSpec, reply: list[str]) -> Exception:
    """The error for a store_update.lua reply that wrote nothing."""
    outcome = reply[0]
    if outcome == "missing":
        return JobNotFound(job_id)
    if outcome == "malformed":
        if reply[1] == "record":
            return InvalidRecord("record", f"job {job_id!r}: not a hash, or a field not UTF-8")
        return InvalidRecord(reply[1], f"job {job_id!r}: stored value malformed or missing")
    if outcome == "version" and spec.expected_version is not None:
        return VersionConflict(job_id, spec.expected_version, int(reply[1]))
    if outcome == "illegal" and spec.status is not None:
        return IllegalTransition(job_id, reply[1], spec.status.value)
    # The script's own argument checks: unreachable past the store's validation.
    return ValidationError(reply[-1], f"refused by store_update ({outcome})")


def _updated(current: JobRecord, spec: UpdateSpec, version: int, updated_at: float) -> JobRecord:
    """The record the update script wrote: the validated read with the update applied."""
    return dataclasses.replace(
        current,
        status=current.status if spec.status is None else spec.status,
        payload=current.payload if spec.payload_json is None else json.loads(spec.payload_json),
        result=current.result if spec.result_json is None else json.loads(spec.result_json),
        error=current.error if spec.error is None else spec.error,
        updated_at=updated_at,
        version=version,
    )
