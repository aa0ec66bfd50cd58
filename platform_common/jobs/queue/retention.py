"""Bounded retention of the jobs kept for an operator: the dead-letter and failed lists.

A job that ends dead or failed keeps its record and result for `dead_letter_retention`
(a Redis TTL set by the fail script). Its list entry is pruned here, from the oldest
end: beyond `dead_letter_max` entries (record and result deleted too), or once Redis
dropped its record. Each run reads at most PRUNE_BATCH ids per list, never the whole
list, and is safe to run from any number of workers at once."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.exceptions import ResponseError

from .connection import QueueConnection

__all__ = ["PRUNE_BATCH", "PruneReport", "Retention"]

PRUNE_BATCH = 500
"""Oldest entries of each list one run looks at (bounded work per run)."""

log = logging.getLogger("platform_common.jobs.queue.retention")


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one run removed from one agent type's kept lists."""

    beyond_cap: int = 0
    """Oldest entries past dead_letter_max: entry, record and result deleted."""
    expired: int = 0
    """Entries whose record had passed its retention (Redis had dropped it)."""


class Retention:
    """Prunes the dead-letter and failed lists of one agent type."""

    def __init__(self, connection: QueueConnection, agent_type: str) -> None:
        self._connection = connection
        self._cap = connection.settings.dead_letter_max
        self.keys = connection.keys(agent_type)

    async def prune(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """One bounded pruning pass over both lists."""
        beyond_cap = expired = 0
        for list_key in (self.keys.dead, self.keys.failed):
            try:
                removed = await self._prune_list(list_key, batch)
            except ResponseError as exc:
                # A key of another type (another app, a manual fix): leave it for the
                # operator to see, and never stop the worker's chores over it.
                log.warning("retention cannot prune %s: %s", list_key, exc)
                continue
            beyond_cap += removed[0]
            expired += removed[1]
        report = PruneReport(beyond_cap, expired)
        if beyond_cap or expired:
            log.info(
                "retention pruned agent_type=%s beyond_cap=%d expired=%d",
                self.keys.agent_type, beyond_cap, expired,
            )  # fmt: skip
        return report

    async def _prune_list(self, list_key: str, batch: int) -> tuple[int, int]:
        client = self._connection.client
        # The oldest entries sit at the right end (the fail script LPUSHes).
        oldest_last: list[str] = await client.lrange(list_key, -batch, -1)  # type: ignore[misc]
        if not oldest_last:
            return 0, 0
        job_ids = oldest_last[::-1]
        script_keys = [list_key]
        for job_id in job_ids:
            script_keys += [self.keys.job(job_id), self.keys.result(job_id)]
        beyond_cap, expired = await self._connection.run_script(
            self._connection.scripts.kept_prune, script_keys, [self._cap, *job_ids]
        )
        return int(beyond_cap), int(expired)
