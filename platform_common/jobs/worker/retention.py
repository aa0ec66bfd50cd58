"""Bounded retention of the jobs kept for an operator: the dead-letter and failed lists.

A job that ends dead or failed keeps its record and result for `dead_letter_retention`
(a Redis TTL set by the fail script). Its list entry is pruned here, from the oldest
end: beyond `dead_letter_max` entries (record and result deleted too), or once Redis
dropped its record. Each run reads at most PRUNE_BATCH ids per list, never the whole
list, and is safe to run from any number of workers at once. A list of another type is
refused (CorruptQueueState, nothing written); the worker's chore reports it and retries."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import CorruptQueueState
from ..queue.connection import QueueConnection

__all__ = ["PRUNE_BATCH", "PruneReport", "Retention"]

PRUNE_BATCH = 500
"""Oldest entries of each list one run looks at (bounded work per run)."""

log = logging.getLogger("platform_common.jobs.worker.retention")


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
        """One bounded pruning pass over both lists.

        CorruptQueueState (naming the key) if a list holds another type: that list is
        left as it is, the other is pruned all the same, then the refusal is raised."""
        lists = (self.keys.dead, self.keys.failed)
        # One round trip reads both lists' oldest ends; TYPE first, so a key of another
        # type is named without a second look.
        replies = await self._connection.execute_many(
            [command for key in lists for command in (("TYPE", key), ("LRANGE", key, -batch, -1))]
        )
        beyond_cap = expired = 0
        # One list's state never stops the other's pruning.
        refusals: list[CorruptQueueState] = []
        for list_key, kind, oldest_last in zip(lists, replies[::2], replies[1::2], strict=True):
            if isinstance(kind, Exception):
                raise kind
            if kind not in ("list", "none"):  # then LRANGE failed too: WRONGTYPE
                refusals.append(
                    CorruptQueueState(list_key, f"holds a {kind}, where the queue keeps a list")
                )
                continue
            if isinstance(oldest_last, Exception):
                raise oldest_last
            try:
                removed = await self._prune_list(list_key, oldest_last)
            except CorruptQueueState as exc:  # the list changed type since it was read
                refusals.append(exc)
                continue
            beyond_cap += removed[0]
            expired += removed[1]
        if beyond_cap or expired:
            log.info(
                "retention pruned agent_type=%s beyond_cap=%d expired=%d",
                self.keys.agent_type, beyond_cap, expired,
            )  # fmt: skip
        if refusals:
            raise refusals[0]
        return PruneReport(beyond_cap, expired)

    async def _prune_list(self, list_key: str, oldest_last: list[str]) -> tuple[int, int]:
        if not oldest_last:
            return 0, 0
        # The oldest entries sit at the right end (the fail script LPUSHes).
        job_ids = oldest_last[::-1]
        script_keys = [list_key]
        for job_id in job_ids:
            script_keys += [self.keys.job(job_id), self.keys.result(job_id)]
        beyond_cap, expired, *foreign = await self._connection.run_script(
            self._connection.scripts.kept_prune, script_keys, [self._cap, *job_ids]
        )
        for job_id in foreign:
            # Pruned beyond the cap; its job key is no record the queue wrote: left to the
            # operator, who is told once (the entry is gone, so no later run sees it).
            log.warning(
                "pruned entry job=%s of %s whose job key %s holds another type than a "
                "hash; that key is left as it is",
                job_id, list_key, self.keys.job(job_id),
                extra={"job_id": job_id, "key": self.keys.job(job_id)},
            )  # fmt: skip
        return int(beyond_cap), int(expired)
