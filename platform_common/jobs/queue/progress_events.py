"""Progress events of one agent type, for the orchestrator: an async iterator over
`agent:<type>:progress`, the way Completions iterates completions.

An event carries its report, so none is read back. Pub/sub is at-most-once: a report
published while the subscriber is disconnected is gone, so for the jobs it watches the
iterator re-reads their stored last report each time its subscription is confirmed
(first subscribe and every reconnect) and yields the ones newer than it yielded: a
watched job's newest progress is never missed, only reports in between. Redis failures
come out as Completions' do: waited out (reconnect, re-subscribe, re-read) until
`outage_timeout`, then BackendUnavailable from `anext()`; the next `anext()` goes on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from ..errors import BackendUnavailable, CorruptQueueState
from .backend_errors import is_outage, unreachable
from .completions import OUTAGE_TIMEOUT
from .connection import QueueConnection
from .log_text import describe
from .progress import Progress, parse_event, parse_stored

__all__ = ["ProgressEvents"]

_FAILURES = (RedisError, OSError, RedisClusterException)


class ProgressEvents:
    """An async iterator of the progress reports of `agent_type`'s running jobs.

    With `watch` (job ids) only those jobs' reports are yielded, each newer than the one
    yielded before for its job, and the stored last report of each is read again after
    every (re)subscription; without, every event of the type is yielded as it comes
    (none re-read: reports sent while disconnected are missed). `malformed` counts
    messages on the channel that the progress script did not publish, and stored
    reports that do not parse."""

    def __init__(
        self,
        connection: QueueConnection,
        agent_type: str,
        *,
        watch: Iterable[str] = (),
        poll_timeout: float = 1.0,
        outage_timeout: float = OUTAGE_TIMEOUT,
    ) -> None:
        self._connection = connection
        self._keys = connection.known_keys(agent_type)
        self._watched: dict[str, Progress | None] = dict.fromkeys(watch)
        """Watched job id -> the last report yielded for it (None: none yet)."""
        self._poll_timeout = poll_timeout
        self._outage_timeout = outage_timeout
        self._ready: deque[Progress] = deque()
        self._client: Any = None
        self._pubsub: Any = None
        self._closed = False
        self._resync_due = False
        self.malformed = 0
        self.resyncs = 0
        """How many times the watched jobs' reports were re-read."""

    def watch(self, job_id: str) -> None:
        """Yield this job's reports too (its stored one at the next re-read: call
        `resync()` to force one)."""
        self._watched.setdefault(job_id, None)

    def unwatch(self, job_id: str) -> None:
        """Stop yielding this job's reports (e.g. once it completed)."""
        self._watched.pop(job_id, None)

    def __aiter__(self) -> ProgressEvents:
        return self

    async def __anext__(self) -> Progress:
        delay = 0.05
        failing_since: float | None = None
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closed:
                raise StopAsyncIteration
            try:
                await self._subscribe()
                if self._resync_due:
                    await self._resync()
                    self._resync_due = False
                message = await self._pubsub.get_message(timeout=self._poll_timeout)
                delay, failing_since = 0.05, None
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    self._resync_due = True
                elif message["type"] == "message":
                    self._deliver(str(message["data"]))
            except _FAILURES as exc:
                # As Completions: subscribe afresh and re-read, until the outage timeout.
                self._resync_due = True
                await self._unsubscribe()
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self._outage_timeout:
                    raise self._backend_error(exc) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def resync(self) -> None:
        """Re-read the stored report of every watched job; queue those newer than the
        last yielded (one that does not parse is counted in `malformed`).
        BackendUnavailable if Redis cannot be reached or refuses."""
        try:
            await self._resync()
        except _FAILURES as exc:
            raise self._backend_error(exc) from exc

    async def _resync(self) -> None:
        self.resyncs += 1
        watched = sorted(self._watched)
        if not watched:
            return
        pipe = self._connection.client.pipeline(transaction=False)
        for job_id in watched:
            pipe.hmget(self._keys.job(job_id), ["progress", "progress_at"])
        for job_id, (report, at) in zip(watched, await pipe.execute(), strict=True):
            try:
                progress = parse_stored(self._keys, job_id, report, at)
            except CorruptQueueState:
                self.malformed += 1  # (JobQueue.progress raises it; a stream goes on)
                continue
            if progress is not None:
                self._queue(progress)

    def _deliver(self, message: str) -> None:
        progress = parse_event(self._keys.agent_type, message)
        if progress is None:
            self.malformed += 1
        elif not self._watched or progress.job_id in self._watched:
            self._queue(progress)

    def _queue(self, progress: Progress) -> None:
        if progress.job_id in self._watched:
            last = self._watched[progress.job_id]
            # Yielded already (an event and a re-read of one report), or older than what
            # was. Two reports may share a millisecond (the one a handler's end sends
            # at once): the same time is a new report unless it says the same.
            if last is not None and (
                progress.at < last.at or (progress.at == last.at and progress.data == last.data)
            ):
                return
            self._watched[progress.job_id] = progress
        self._ready.append(progress)

    def _backend_error(self, exc: BaseException) -> BackendUnavailable:
        settings = self._connection.settings.redis
        if isinstance(exc, BackendUnavailable):
            return exc
        if is_outage(exc):
            return unreachable(settings, exc)
        return BackendUnavailable(
            f"Redis at {settings.redacted_url()} refused to serve progress events: {describe(exc)}"
        )

    async def _subscribe(self) -> None:
        if self._pubsub is not None:
            return
        # Its own connection: a subscribed connection can serve nothing else. On a
        # cluster any node will do: PUBLISH reaches every node.
        client = self._connection.subscriber_client()
        self._client = client
        self._pubsub = client.pubsub()
        await self._pubsub.subscribe(self._keys.progress_channel)

    async def _unsubscribe(self) -> None:
        pubsub, client = self._pubsub, self._client
        self._pubsub = self._client = None
        with contextlib.suppress(*_FAILURES):
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()

    async def aclose(self) -> None:
        self._closed = True
        await self._unsubscribe()

    async def __aenter__(self) -> ProgressEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
