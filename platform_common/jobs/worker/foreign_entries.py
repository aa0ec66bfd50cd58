"""Entries of the queue list with no job behind them: an id a client pushed with a plain
LPUSH instead of the enqueue script (docs/protocol.md), which no worker could run.

The claim script drops such an entry as it drops any stray ({id, "skip"}). The worker
then looks (only on a skip, so never on the hot path) whether anything of that id is
left: a record, a packed waiting job or a result. Nothing at all is an entry without a
job: counted (Worker.foreign_entries) and logged as a WARNING, the first at once, then at
most one line a minute saying how many more. A stray of the queue's own (a second entry
of a running job, a job that finished or expired while its entry waited: its record or
its result is still there) is not counted. One kind of stray does look the same: the
entry of a job that expired while it waited, popped after its expired result's TTL too
(a backlog of twice the job's TTL); the line says so.

Counted in the worker, not in the stats hash: the claim script stays as it is (the
counters there are each written by the script that performs their transition), and the
fix is in the producer that pushed the id, which the line names the way to."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..keys import QueueKeys
from ..queue.backend_errors import TRANSIENT
from ..queue.connection import QueueConnection
from ..queue.log_text import RateLimit, describe, safe_text

__all__ = ["ForeignEntries"]

LINES_PER_MINUTE = 1


class ForeignEntries:
    """Counts and logs the queue entries of one agent type that had no job."""

    def __init__(self, connection: QueueConnection, keys: QueueKeys, logger: logging.Logger):
        self._connection = connection
        self._keys = keys
        self._log = logger
        self._limit = RateLimit(LINES_PER_MINUTE, 60.0)
        self.count = 0
        """Entries without a job this worker dropped."""

    async def check(self, skipped: Sequence[str]) -> None:
        """Count (and log) those of `skipped`, ids the claim dropped, with nothing left of
        them in Redis. An outage while looking only costs the count of these."""
        keys = self._keys
        commands: list[tuple[str, ...]] = []
        for job_id in skipped:
            commands += [
                ("EXISTS", keys.job(job_id), keys.result(job_id)),
                ("HEXISTS", keys.queued, job_id),
            ]
        try:
            replies = await self._connection.execute_many(commands)
        except TRANSIENT as exc:
            self._log.debug("could not look at %d skipped queue entries: %s", len(skipped),
                            describe(exc))  # fmt: skip
            return
        for index, job_id in enumerate(skipped):
            found, waiting = replies[2 * index : 2 * index + 2]
            if isinstance(found, Exception) or isinstance(waiting, Exception):
                continue  # a key of another type: not an entry without a job
            if int(found) == 0 and int(waiting) == 0:
                self._dropped(job_id)

    def _dropped(self, job_id: str) -> None:
        self.count += 1
        allowed, more = self._limit.allow("entry")
        if not allowed:
            return
        since = f" ({more} more since the last such line)" if more else ""
        self._log.warning(
            "queue entry without a job dropped: job=%s agent_type=%s queue=%s%s; %d so far. "
            "Its id was pushed onto the queue list without the enqueue script (a producer "
            "must call it: docs/protocol.md), or its job expired while it waited and the "
            "expired result has lapsed since",
            safe_text(job_id), self._keys.agent_type, self._keys.queue, since, self.count,
        )  # fmt: skip
