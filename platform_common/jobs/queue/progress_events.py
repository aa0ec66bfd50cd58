"""Progress events of one agent type, for the orchestrator: an async iterator over
`agent:<type>:progress`, re-subscribing and waiting out Redis failures as Completions
does (queue/subscription.py).

An event carries its report, so none is read back. At each confirmed subscription the
stored last report of each watched job is re-read and yielded if newer than the one
yielded: a watched job's newest progress is never missed, only reports in between."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import CorruptQueueState
from .connection import QueueConnection
from .progress import Progress, parse_event, parse_stored
from .subscription import OUTAGE_TIMEOUT, ResubscribingStream

__all__ = ["ProgressEvents"]


class ProgressEvents(ResubscribingStream[Progress]):
    """An async iterator of the progress reports of `agent_type`'s running jobs.

    With `watch` (job ids) only those jobs' reports are yielded, each newer than the one
    yielded before for its job, and the stored last report of each is read again after
    every (re)subscription; without, every event of the type is yielded as it comes
    (none re-read: reports sent while disconnected are missed). `malformed` counts
    messages on the channel that the progress script did not publish, and stored
    reports that do not parse."""

    _serving = "progress events"

    def __init__(
        self,
        connection: QueueConnection,
        agent_type: str,
        *,
        watch: Iterable[str] = (),
        poll_timeout: float = 1.0,
        outage_timeout: float = OUTAGE_TIMEOUT,
    ) -> None:
        super().__init__(connection, poll_timeout=poll_timeout, outage_timeout=outage_timeout)
        self._keys = connection.known_keys(agent_type)
        self._watched: dict[str, Progress | None] = dict.fromkeys(watch)
        """Watched job id -> the last report yielded for it (None: none yet)."""
        self.malformed = 0

    def watch(self, job_id: str) -> None:
        """Yield this job's reports too (its stored one at the next re-read: call
        `resync()` to force one)."""
        self._watched.setdefault(job_id, None)

    def unwatch(self, job_id: str) -> None:
        """Stop yielding this job's reports (e.g. once it completed)."""
        self._watched.pop(job_id, None)

    async def _subscribe_to(self, pubsub: Any) -> None:
        await pubsub.subscribe(self._keys.progress_channel)

    async def _on_message(self, message: dict[str, Any]) -> None:
        if message["type"] == "message":
            self._deliver(str(message["data"]))

    async def _resync(self) -> None:
        """Re-read the stored report of every watched job; queue those newer than the
        last yielded (one that does not parse is counted in `malformed`)."""
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
