"""A worker's ear for cancel requests: one XREAD BLOCK loop on its type's control stream
(keys.py, `control`; written by lua/queue_cancel.lua), from the entry current when the
worker started, on a connection of its own. Each entry names a job; if this worker runs
it, its attempt is told (`on_cancel`), which cancels the handler's task. A stream, not
pub/sub: no worker needs a channel an ACL cannot keep apart from the completion events,
and an entry written while the worker reconnects is still read."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from ..keys import QueueKeys
from ..queue.backend_errors import TRANSIENT, RedisHealth
from ..queue.connection import QueueConnection

__all__ = ["BLOCK_MS", "CancelWatch"]

log = logging.getLogger("platform_common.jobs.worker")

BLOCK_MS = 1000
"""How long one XREAD waits for an entry (a stopping worker ends it at once anyway)."""
BATCH = 100


class CancelWatch:
    """Reads `keys.control` and calls `on_cancel(job_id, reason)` for each entry."""

    def __init__(
        self,
        connection: QueueConnection,
        keys: QueueKeys,
        health: RedisHealth,
        on_cancel: Callable[[str, str], None],
    ) -> None:
        self._connection = connection
        self._keys = keys
        self._health = health
        self._on_cancel = on_cancel
        self._client = connection.blocking_client()
        self.seen = 0
        """Entries read (for tests and the stop line)."""

    async def start_id(self) -> str:
        """The id of the stream's last entry now ("0-0" when it has none): what came
        before this worker started is not its business."""
        last = await self._client.xrevrange(self._keys.control, count=1)
        return _text(last[0][0]) if last else "0-0"

    async def first_id(self) -> str | None:
        """start_id(), or None when Redis cannot say now (run() asks again)."""
        try:
            return await self.start_id()
        except TRANSIENT as exc:
            self._health.failed("reading cancel requests", exc)
            return None

    async def run(self, after: str | None = None) -> None:
        """Read entries after `after` (None: after start_id()) until cancelled; outages
        are waited out (and reported by `health`)."""
        delay = 0.05
        while True:
            try:
                if after is None:
                    after = await self.start_id()
                replies: Any = await self._client.xread(
                    {self._keys.control: after}, count=BATCH, block=BLOCK_MS
                )
                self._health.ok()
                delay = 0.05
            except ResponseError as exc:  # WRONGTYPE: not the queue's stream (or a refusal)
                self._health.failed("reading cancel requests", exc)
                await asyncio.sleep(BLOCK_MS / 1000)
                continue
            except TRANSIENT as exc:
                self._health.failed("reading cancel requests", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            for _stream, entries in _streams(replies):
                for entry_id, fields in entries:
                    after = _text(entry_id)
                    self.seen += 1
                    job_id = _field(fields, "job")
                    if job_id:
                        self._on_cancel(job_id, _field(fields, "reason"))

    async def aclose(self) -> None:
        await self._client.aclose()


def _streams(replies: Any) -> list[tuple[Any, list[tuple[Any, Any]]]]:
    """XREAD's reply, as a list (RESP2) or a dict (RESP3), as [(stream, entries)]."""
    if not replies:
        return []
    if isinstance(replies, dict):
        return [(stream, list(entries)) for stream, entries in replies.items()]
    return [(stream, list(entries)) for stream, entries in replies]


def _field(fields: Any, name: str) -> str:
    if not isinstance(fields, dict):
        return ""
    value = fields.get(name, fields.get(name.encode()))
    return _text(value) if value is not None else ""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
