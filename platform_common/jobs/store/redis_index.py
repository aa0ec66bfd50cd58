"""The Redis side of the time index: bucket reads, row fetches, repair, backfill, sweep.

A mixin of RedisJobStore: every read is one pipelined round trip, every write one of
the `store_index_*.lua` scripts (record and index entry checked together). The
paging algorithm itself is backend-neutral and lives in listing.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from ..errors import InvalidRecord
from ..keys import SHARED_OWNER_BUCKET, StoreKeys
from ..redis.script import Script, run_command, run_pipelined
from ..redis.url import RedisClient
from .listing import BackfillReport, IndexBackend, Row
from .record_hash import ROW_FIELDS, exact_us, is_wrong_type, parse_hash
from .time_index import job_id_of, member, owner_bucket

__all__ = ["INDEX_SKIP_LOG_INTERVAL", "IndexSkipLog", "RedisTimeIndex"]

logger = logging.getLogger("platform_common.jobs.store.redis_store")

_SCAN_COUNT = 1000

INDEX_SKIP_LOG_INTERVAL = 60.0
"""Seconds between two of one store's IndexSkipLog lines."""


class IndexSkipLog:
    """The WARNING for a create or delete that went on without its time-index entry (the
    owner's index key holds another type). Every write to that owner meets the same key,
    so a line per write would flood the log: the first is logged at once, then at most
    one line per `interval` seconds, saying how many more there were since the last
    line; `flush()` (the store's close) logs a count still unsaid.

    Thread-safe: a store may be used from the event loops of several threads."""

    def __init__(
        self,
        agent: str,
        *,
        interval: float = INDEX_SKIP_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._agent = agent
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last_line: float | None = None
        self._unsaid = 0

    def skipped(self, verb: str, bucket: str) -> None:
        """`verb` ("create", "delete") went on without its entry in `bucket`'s index."""
        now = self._clock()
        with self._lock:
            if self._last_line is not None and now - self._last_line < self._interval:
                self._unsaid += 1
                return
            earlier, self._unsaid, self._last_line = self._unsaid, 0, now
        note = f" ({earlier} more since the last report)" if earlier else ""
        logger.warning(
            "time index of agent %s, bucket %r, is not a sorted set: %s went on without "
            "its entry (delete the key, then run the backfill)%s",
            self._agent, bucket, verb, note,
            extra={"agent": self._agent, "bucket": bucket, "verb": verb, "suppressed": earlier},
        )  # fmt: skip

    def flush(self) -> None:
        """Log the writes left out since the last line, if any."""
        with self._lock:
            earlier, self._unsaid = self._unsaid, 0
        if earlier:
            logger.warning(
                "time index of agent %s: %d more creates or deletes went on without their "
                "entry since the last report (delete the key, then run the backfill)",
                self._agent, earlier,
                extra={"agent": self._agent, "suppressed": earlier},
            )  # fmt: skip


@dataclass(slots=True)
class Binding:
    """A store's client for one event loop, and the scripts run through it."""

    client: RedisClient

    async def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run `lua/<name>.lua` once; its error raised."""
        return await run_command(self.client, Script.named(name).call(keys, args))

    async def run_many(self, name: str, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run `lua/<name>.lua` once per (keys, args) in one pipeline; the first error
        raised after every call has run."""
        script = Script.named(name)
        replies = await run_pipelined(self.client, [script.call(k, a) for k, a in calls])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies


class RedisTimeIndex(IndexBackend):
    """Index primitives over `keys`; the store provides `_binding` and `_unavailable`."""

    keys: StoreKeys
    _sweep_position: tuple[str, str] = ("", "")

    def _binding(self) -> Binding:
        raise NotImplementedError

    def _unavailable(self) -> AbstractContextManager[None]:
        raise NotImplementedError

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

    async def _read_each(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Read commands in one pipeline, each reply or its error in place, never raised:
        a key holding another type, or bytes that are not UTF-8, spoil their reply only."""
        client = self._binding().client
        try:
            async with client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                replies = list(await pipe.execute(raise_on_error=False))
        except UnicodeDecodeError:
            pass
        else:
            if not any(isinstance(reply, UnicodeDecodeError) for reply in replies):
                return replies
        # redis-py decodes while it reads: a reply that is not UTF-8 abandons the rest of
        # the pipeline (raised on one node, or the connection dropped under the replies
        # after it on a cluster). Rare: read the batch again one command at a time.
        replies = []
        for command in commands:
            try:
                replies.append(await client.execute_command(*command))
            except (ResponseError, UnicodeDecodeError) as exc:
                replies.append(exc)
        return replies

    async def _fetch_rows(self, job_ids: Sequence[str], include_payload: bool) -> list[Row | None]:
        fields = list(ROW_FIELDS if include_payload else ROW_FIELDS[:1] + ROW_FIELDS[2:])
        with self._unavailable():
            replies = await self._read_each(
                [("HMGET", self.keys.record(job_id), *fields) for job_id in job_ids]
            )
        rows: list[Row | None] = []
        for job_id, values in zip(job_ids, replies, strict=True):
            if _spoiled(values):
                logger.warning("skipping unreadable record %r in a listing: %s", job_id, values)
                rows.append(None)
                continue
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
            return sum(await self._binding().run_many("store_index_repair", calls))

    async def _record_key_batches(
        self, size: int, cap: int | None = None
    ) -> AsyncIterator[list[str]]:
        """The record keys, `size` at a time, the first `cap` of them (None: all)."""
        batch: list[str] = []
        scanned = 0
        async for key in self._record_keys():
            batch.append(key)
            scanned += 1
            if len(batch) >= size or scanned == cap:
                yield batch
                batch = []
            if scanned == cap:
                return
        if batch:
            yield batch

    async def _legacy_members(self, buckets: Sequence[str], cap: int) -> list[str]:
        visible = set(buckets)
        members: list[str] = []
        with self._unavailable():
            async for batch in self._record_key_batches(_SCAN_COUNT, cap):
                members += await self._visible_members(batch, visible)
        return members

    async def _visible_members(self, record_keys: list[str], visible: set[str]) -> list[str]:
        replies = await self._read_each(
            [("HMGET", key, "owner_oid", "created_at") for key in record_keys]
        )
        members = []
        for key, reply in zip(record_keys, replies, strict=True):
            if _spoiled(reply):
                continue  # not a readable record: nothing to list
            owner, created = reply
            if created is not None and owner_bucket(owner or "") in visible:
                exact = exact_us(created)
                if exact is not None:
                    members.append(member(exact, self.keys.job_id_of(key)))
        return members

    async def _backfill(
        self, dry_run: bool, batch: int, progress: Callable[[int], None] | None
    ) -> BackfillReport:
        report = BackfillReport(dry_run=dry_run)
        with self._unavailable():
            async for keys in self._record_key_batches(batch):
                await self._backfill_batch(keys, dry_run, report, progress)
        return report

    async def _backfill_batch(
        self,
        record_keys: list[str],
        dry_run: bool,
        report: BackfillReport,
        progress: Callable[[int], None] | None,
    ) -> None:
        owners = await self._read_each([("HGET", key, "owner_oid") for key in record_keys])
        flag = "1" if dry_run else "0"
        # A key whose owner cannot be read (not a hash, not UTF-8) names no index: it is
        # malformed without asking the script.
        readable = [
            (key, owner or "")
            for key, owner in zip(record_keys, owners, strict=True)
            if not _spoiled(owner)
        ]
        outcomes = dict.fromkeys(record_keys, -2)
        replies = await self._binding().run_many(
            "store_index_backfill",
            [
                (
                    [key, self.keys.index(owner_bucket(owner))],
                    [owner, self.keys.job_id_of(key), flag],
                )
                for key, owner in readable
            ],
        )
        outcomes.update(zip((key for key, _ in readable), replies, strict=True))
        buckets = {key: owner_bucket(owner) for key, owner in readable}
        for key, outcome in outcomes.items():
            report.scanned += 1
            if outcome == 1:
                report.added += 1
            elif outcome == 0:
                report.present += 1
            else:
                report.skipped += 1
                if outcome == -2 and len(report.malformed) < 100:
                    report.malformed.append(self.keys.job_id_of(key))
                bad = outcome == -4 and buckets[key] not in report.bad_buckets
                if bad and len(report.bad_buckets) < 100:
                    report.bad_buckets.append(buckets[key])
        if progress is not None:
            progress(report.scanned)

    async def _sweep(self, max_entries: int) -> int:
        client = self._binding().client
        removed = examined = 0
        with self._unavailable():
            pattern = self.keys.index_scan_pattern()
            # Sorted sets only: an index key holding another type has no entries to
            # sweep, and ZRANGEBYLEX on it would stop the sweep for every bucket.
            index_keys = sorted(
                [k async for k in client.scan_iter(match=pattern, count=_SCAN_COUNT, _type="zset")]
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


def _spoiled(reply: Any) -> bool:
    """True for a reply spoiled by its key's data (another type, bytes that are not
    UTF-8), False for a reply. Any other error (the server refusing: ACL, OOM, ...) is
    raised, never mistaken for bad data."""
    if not isinstance(reply, Exception):
        return False
    if isinstance(reply, UnicodeDecodeError):
        return True
    if isinstance(reply, ResponseError) and is_wrong_type(reply):
        return True
    raise reply
