"""One attempt's progress reports: checked, rate-limited per job, stored fenced by the
lease token (lua/queue_progress.lua).

At most one report is stored per `progress_interval`: one made sooner is held (the last
wins) and stored when the interval has passed, or before the outcome is recorded when
the handler ends. docs/user-guide.md, "Progress", says what holds for a handler
(refusals, LeaseLost, outages that never reach it)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from ..errors import InvalidProgress, LeaseLost
from ..keys import QueueKeys
from ..queue.backend_errors import TRANSIENT, is_script_error
from ..queue.connection import QueueConnection
from ..queue.log_text import describe
from ..queue.progress import encode_progress
from .attempt_calls import lost_reason
from .attempt_log import log

__all__ = ["ENDED", "ProgressReporter", "store_progress"]

ENDED = "the attempt has ended: its progress can no longer be reported"
"""The LeaseLost reason of a report made after the worker settled the attempt."""


async def store_progress(
    connection: QueueConnection, keys: QueueKeys, job_id: str, token: str, report: str
) -> int:
    """Store and publish one encoded report (encode_progress) of the attempt holding
    `token`; Redis' time of it (ms). LeaseLost when the token no longer owns a running
    job; InvalidProgress when the script refuses the report; CorruptQueueState when the
    job key holds another type (nothing written)."""
    settings = connection.settings
    try:
        reply = await connection.run_script(
            connection.scripts.progress,
            [keys.job(job_id)],
            [job_id, token, report, settings.max_progress_bytes, keys.progress_channel],
        )
    except ResponseError as exc:
        text = str(exc)
        if text.startswith("progress "):  # the script's own refusal (redis-py drops "ERR ")
            raise InvalidProgress(text.removeprefix("progress ")) from None
        raise
    if reply[0] == "lost":
        raise LeaseLost(job_id, lost_reason(reply[1]))
    return int(reply[1])


class ProgressReporter:
    """The reports of one attempt (see the module docstring). Made on the worker's event
    loop; `report` runs there, `report_sync` in a sync handler's thread."""

    def __init__(
        self,
        connection: QueueConnection,
        keys: QueueKeys,
        job_id: str,
        token: str,
        *,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`interval`: the shortest time between two stored reports (default: the
        settings' progress_interval)."""
        settings = connection.settings
        self._connection = connection
        self._keys = keys
        self.job_id = job_id
        self._token = token
        self._interval = settings.progress_interval if interval is None else interval
        self._max_bytes = settings.max_progress_bytes
        self._patience = settings.lease_seconds
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._last_stored = -float("inf")
        """When the last write started, on `clock`: the window counts from there."""
        self._held: str | None = None
        self._sending: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        """The write of a held report (a reference, so the task is not collected)."""
        self._refusal: str | None = None
        """Why reports are refused now (LeaseLost's reason), None while they are taken."""
        self._warned = False
        self.stored = 0
        """Reports written to Redis."""
        self.replaced = 0
        """Reports held and replaced by a later one before they were written."""

    async def report(self, data: Any) -> None:
        """Check and encode `data` (InvalidProgress), then store it now, or hold it until
        the interval since the last stored report has passed. LeaseLost once the lease is
        lost or the attempt ended."""
        await self.submit(encode_progress(data, self._max_bytes))

    def report_sync(self, data: Any) -> None:
        """report() from a sync handler's thread: blocks it until the report is stored
        or held (at most a lease, then LeaseLost: the worker's loop did not answer)."""
        encoded = encode_progress(data, self._max_bytes)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None  # no loop runs in this thread: as it should be
        if running is self._loop:  # waiting here would block the loop that must answer
            raise RuntimeError("report_progress_sync on the event loop: await report_progress")
        try:
            future = asyncio.run_coroutine_threadsafe(self.submit(encoded), self._loop)
        except RuntimeError:  # the loop is closed: the worker is gone
            raise LeaseLost(self.job_id, ENDED) from None
        try:
            future.result(timeout=self._patience)
        except TimeoutError:
            future.cancel()
            raise LeaseLost(
                self.job_id, f"the worker did not take the report within {self._patience:g} s"
            ) from None

    async def submit(self, report: str) -> None:
        """Store an encoded report now, or hold it (see report())."""
        if self._refusal is not None:
            raise LeaseLost(self.job_id, self._refusal)
        if self._sending is not None or self._clock() < self._last_stored + self._interval:
            if self._held is not None:
                self.replaced += 1
            self._held = report
            self._schedule()
            return
        await self._store(report)

    async def flush(self) -> None:
        """The attempt's handler ended: store the report still held, whatever the window
        (after a write in flight), then refuse any later one. Never raises: the outcome
        is recorded next whatever happens here."""
        self._cancel_timer()
        with contextlib.suppress(Exception):
            if self._sending is not None:
                await asyncio.shield(self._sending)
            if self._held is not None and self._refusal is None:
                report, self._held = self._held, None
                await self._store(report)
        self.close()

    def close(self) -> None:
        """Refuse every later report (the attempt ended, or its lease was lost); drop the
        one held."""
        self._cancel_timer()
        self._held = None
        if self._refusal is None:
            self._refusal = ENDED

    async def _store(self, report: str) -> None:
        await self._write(report, self._begin())

    def _begin(self) -> asyncio.Future[None]:
        """Mark a write in flight, before anything is awaited: a report made meanwhile is
        held, never written ahead of (and then overwritten by) an older one."""
        self._last_stored = self._clock()
        sending = self._sending = self._loop.create_future()
        return sending

    async def _write(self, report: str, sending: asyncio.Future[None]) -> None:
        try:
            await store_progress(self._connection, self._keys, self.job_id, self._token, report)
            self.stored += 1
        except LeaseLost as exc:
            self._refusal = exc.reason
            self._held = None
            raise
        except TRANSIENT as exc:
            if isinstance(exc, ResponseError) and is_script_error(exc):
                raise  # CorruptQueueState: the same call fails again
            # An outage: tried again a window later, unless a newer report is held.
            if self._held is None:
                self._held = report
            self._warn(exc)
        finally:
            self._sending = None
            sending.set_result(None)
        if self._held is not None:
            self._schedule()

    def _schedule(self) -> None:
        """Store the held report when the window ends (one timer at a time)."""
        if self._timer is None and self._refusal is None:
            delay = max(0.0, self._last_stored + self._interval - self._clock())
            self._timer = self._loop.call_later(delay, self._window_ended)

    def _window_ended(self) -> None:
        self._timer = None
        if self._sending is not None or self._held is None or self._refusal is not None:
            return  # a write in flight schedules the next one when it ends
        report, self._held = self._held, None
        self._task = self._loop.create_task(self._store_held(report, self._begin()))

    async def _store_held(self, report: str, sending: asyncio.Future[None]) -> None:
        try:
            await self._write(report, sending)
        except LeaseLost:
            pass  # the next report raises it (the handler is being cancelled anyway)
        except Exception as exc:  # a refusal: nobody awaits this write, so say it here
            log.warning("progress of job=%s not stored: %s", self.job_id, describe(exc))

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "progress of job=%s not stored (tried again): %s", self.job_id, describe(exc)
            )

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
