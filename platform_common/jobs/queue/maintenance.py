"""The periodic chores every worker runs: reaper, retry promoter, TTL cleanup, heartbeat.

Each is one bounded step, safe to run from any number of processes at once (every
change is re-checked inside its script), so no leader election is needed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from redis.exceptions import ResponseError

from ..status import AttemptOutcome
from .connection import QueueConnection
from .expiry import ExpireReport, expire_in_order, expire_jobs, expire_queued
from .leases import Leases
from .retention import PruneReport, Retention

__all__ = ["Maintenance", "ReapReport"]

log = logging.getLogger("platform_common.jobs.queue.maintenance")

PROCESSING_SCAN = 1000
"""Oldest processing entries the reaper inspects for a missing lease, per run."""
PROMOTE_BATCH = 1000
"""Most due retries moved to the queue per promoter run."""
LEASE_EXPIRED = "lease expired: the worker stopped renewing"
"""The error the reaper records for an attempt whose worker died, hung or lost Redis."""


@dataclass(frozen=True, slots=True)
class ReapReport:
    """What one reaper run did, by outcome of the expired leases it found."""

    retried: int = 0
    dead: int = 0
    requeued: int = 0
    """Entries taken with BLMOVE by a worker that died before claiming: not an attempt."""
    ended: tuple[tuple[str, str, str], ...] = ()
    """(job_id, outcome, trace_context) of each attempt this run ended (retrying or
    dead), to log them; trace_context is the job record's ("" if it has none)."""


class Maintenance:
    """The chores for one agent type."""

    def __init__(self, connection: QueueConnection, agent_type: str) -> None:
        self._connection = connection
        self._settings = connection.settings
        self._leases = Leases(connection, agent_type)
        self._retention = Retention(connection, agent_type)
        self.keys = self._leases.keys

    async def reap(self, limit: int = 100) -> ReapReport:
        """Return jobs whose lease expired: a retry (a crash is an attempt) or a dead
        letter after the last attempt. Jobs taken but never claimed go back unchanged."""
        keys = self.keys
        lease_ms = int(self._settings.lease_seconds * 1000)
        given_back, *expired = await self._connection.run_script(
            self._connection.scripts.reap_scan,
            [keys.processing, keys.leases, keys.queued, keys.queue],
            [lease_ms, PROCESSING_SCAN, limit],
        )
        if not expired:
            return ReapReport(requeued=int(given_back))
        calls = [self._leases.fail_call(job_id, "", LEASE_EXPIRED, "lost") for job_id in expired]
        replies = await self._connection.run_script_many(self._connection.scripts.fail, calls)
        outcomes, carried = [], []
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            outcomes.append(reply[0])
            # The ended attempt's replies end with the record's trace context (mode "lost").
            ended_reply = reply[0] in (AttemptOutcome.RETRYING, AttemptOutcome.DEAD)
            carried.append(str(reply[-1]) if ended_reply and len(reply) > 1 else "")
        ended = (AttemptOutcome.RETRYING, AttemptOutcome.DEAD)
        return ReapReport(
            retried=outcomes.count(AttemptOutcome.RETRYING),
            dead=outcomes.count(AttemptOutcome.DEAD),
            requeued=int(given_back) + outcomes.count(AttemptOutcome.REQUEUED),
            ended=tuple(
                (str(job_id), str(outcome), trace_context)
                for job_id, outcome, trace_context in zip(expired, outcomes, carried, strict=True)
                if outcome in ended
            ),
        )

    async def promote(self) -> int:
        """Move retries whose backoff elapsed to the front of the queue."""
        keys = self.keys
        return int(
            await self._connection.run_script(
                self._connection.scripts.promote,
                [keys.delayed, keys.queue, keys.waiting],
                [PROMOTE_BATCH],
            )
        )

    async def cleanup(self, limit: int | None = None, *, now_ms: int | None = None) -> list[str]:
        """Expire up to `limit` (default cleanup_batch) unfinished jobs past their TTL;
        the ids of the jobs expired (expire_due says more)."""
        return list((await self.expire_due(limit, now_ms=now_ms)).expired)

    async def expire_due(
        self,
        limit: int | None = None,
        *,
        now_ms: int | None = None,
        on_expired: Callable[[ExpireReport], None] | None = None,
    ) -> ExpireReport:
        """Expire up to `limit` (default cleanup_batch) unfinished jobs past their TTL,
        and say which, with the trace context each carried (for its log line). The run
        has three steps, each atomic per script call: claimed jobs, waiting jobs by
        their expiry bucket, waiting jobs in deadline order from the queue list's tail.
        `on_expired` hears each step's report as soon as it is done, so what an earlier
        step expired is told even when a later one raises (CorruptQueueState).

        Candidates are picked by Redis's clock: `now_ms` if the caller knows it (a worker
        estimates it from Redis TIME it saw), else one TIME call; this machine's clock
        is never used (the script decides with Redis TIME anyway). Stale results need no
        sweep: every result and finished record is written with its TTL, so Redis drops
        it; dead and failed jobs get theirs too (dead_letter_retention), see prune_kept."""
        batch = limit or self._settings.cleanup_batch
        if now_ms is None:
            now_ms = await self.redis_time_ms()
        try:
            due = await self._connection.client.zrangebyscore(
                self.keys.expiry, "-inf", now_ms, start=0, num=batch
            )
        except ResponseError as exc:
            # WRONGTYPE: CorruptQueueState worded as queue_expire.lua's refusal.
            raise await self._connection.refusal(exc, [self.keys.expiry]) from exc
        connection = self._connection
        done = ExpireReport()

        def told(step: ExpireReport) -> None:
            nonlocal done
            done += step
            for job_id, problem in step.corrupt:
                log.warning(
                    "expired job=%s whose stored record does not parse: %s", job_id, problem,
                    extra={
                        "job_id": job_id, "agent_type": self.keys.agent_type, "problem": problem,
                    },
                )  # fmt: skip
            if on_expired is not None and step.expired:
                on_expired(step)

        run, read, refusal = connection.run_script, connection.execute_many, connection.refusal
        scripts = connection.scripts
        told(await expire_jobs(run, scripts.expire, self.keys, due))
        told(await expire_queued(run, read, refusal, scripts.expire_queued, self.keys, now_ms))
        # The jobs written in deadline order have no expiry bucket: found from the tail.
        told(await expire_in_order(run, read, refusal, scripts.expire_tail, self.keys))
        return done

    async def prune_kept(self) -> PruneReport:
        """Bound the dead-letter and failed lists (see retention.py); one bounded step."""
        return await self._retention.prune()

    async def redis_time_ms(self) -> int:
        """Redis TIME in ms (one round trip)."""
        seconds, micros = await self._connection.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def heartbeat(
        self, worker_id: str, in_progress: int = 0, *, leaving: bool = False
    ) -> int:
        """Record that `worker_id` is alive with `in_progress` jobs running (or gone, its
        count with it); returns the Redis time in ms."""
        # bool is an int: a True here is a caller's mistake, not one job.
        if type(in_progress) is not int:
            raise TypeError(f"in_progress must be an int (jobs running), got {in_progress!r}")
        if in_progress < 0:
            raise ValueError(f"in_progress must be >= 0 (jobs running), got {in_progress}")
        prune_ms = int(self._settings.heartbeat_interval * 10 * 1000)
        return int(
            await self._connection.run_script(
                self._connection.scripts.heartbeat,
                [self.keys.workers, self.keys.worker_jobs],
                [worker_id, "leave" if leaving else "beat", prune_ms, in_progress],
            )
        )
