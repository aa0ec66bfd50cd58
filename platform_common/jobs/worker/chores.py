"""The periodic chores every worker runs: reaper, retry promoter, TTL cleanup, pruning
of kept jobs, heartbeat, the minute's history sample (Chores: one bounded step each;
ChoreLoop: each on its interval).

Each is one bounded step, safe to run from any number of processes at once (every
change is re-checked inside its script), so no leader election is needed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..errors import CorruptQueueState
from ..keys import HISTORY_MINUTES, STATS_COUNTERS
from ..queue.backend_errors import TRANSIENT, RedisHealth
from ..queue.connection import QueueConnection
from ..queue.expiry import ExpireReport, expire_due, redis_time_ms
from ..queue.queue_settings import QueueSettings
from ..queue.tracing import QueueTracing
from ..status import AttemptOutcome
from .attempt_calls import AttemptCalls
from .attempt_log import AttemptLog, log
from .lease_keeper import LeaseKeeper
from .retention import PruneReport, Retention
from .settlement import wait_or_stop

__all__ = ["ChoreLoop", "Chores", "HistoryStep", "ReapReport", "RedisClock"]


PROCESSING_SCAN = 1000
"""Oldest processing entries the reaper inspects for a missing lease, per run."""
PROMOTE_BATCH = 1000
"""Most due retries moved to the queue per promoter run."""
LEASE_EXPIRED = "lease expired: the worker stopped renewing"
TTL_EXPIRED = "TTL passed: the cleanup expired the job (not started or not finished in time)"
"""The error the reaper records for an attempt whose worker died, hung or lost Redis."""
HISTORY_DELAY = 0.2
"""Seconds past the start of a minute at which the history chore samples it: its wait is
reckoned by Redis' clock but slept on the loop's, so it aims a little into the minute."""


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
    cancelled: tuple[tuple[str, str], ...] = ()
    """(job_id, trace_context) of each job this run ended cancelled: a cancel had been
    asked for, and its worker was gone (queue/cancel.py)."""


@dataclass(frozen=True, slots=True)
class HistoryStep:
    """What one history call did."""

    wrote: bool
    """This call wrote the minute's sample (False: another worker's call had)."""
    next_minute_in: float
    """Seconds until the next minute starts, by Redis' clock (or by the time given)."""


class Chores:
    """The chores for one agent type."""

    def __init__(self, connection: QueueConnection, agent_type: str) -> None:
        self._connection = connection
        self._settings = connection.settings
        self._leases = AttemptCalls(connection, agent_type)
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
        outcomes: list[str] = []
        ended: list[tuple[str, str, str]] = []
        cancelled: list[tuple[str, str]] = []
        for job_id, reply in zip(expired, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            outcome = reply[0]
            outcomes.append(outcome)
            # An ended attempt's reply ends with the record's trace context (mode "lost").
            carried = str(reply[-1]) if len(reply) > 1 else ""
            if outcome in (AttemptOutcome.RETRYING, AttemptOutcome.DEAD):
                ended.append((str(job_id), str(outcome), carried))
            elif outcome == AttemptOutcome.CANCELLED:
                cancelled.append((str(job_id), carried))
        return ReapReport(
            retried=outcomes.count(AttemptOutcome.RETRYING),
            dead=outcomes.count(AttemptOutcome.DEAD),
            requeued=int(given_back) + outcomes.count(AttemptOutcome.REQUEUED),
            ended=tuple(ended),
            cancelled=tuple(cancelled),
        )

    async def promote(self) -> int:
        """Move retries whose backoff elapsed to the front of the queue."""
        keys = self.keys
        return int(
            await self._connection.run_script(
                self._connection.scripts.promote,
                [keys.delayed, keys.queue, keys.waiting, *keys.level_queues, keys.fair_ring],
                [PROMOTE_BATCH, keys.job("")],
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
        """See queue.expiry.expire_due."""
        return await expire_due(
            self._connection, self.keys, limit, now_ms=now_ms, on_expired=on_expired
        )

    async def prune_kept(self) -> PruneReport:
        """Bound the dead-letter and failed lists (see retention.py); one bounded step."""
        return await self._retention.prune()

    async def record_history(self, *, now_ms: int | None = None) -> HistoryStep:
        """Sample the counters and depths into the history stream (keys.py), once per
        minute of Redis' clock however many workers call it, trimmed to HISTORY_MINUTES.
        `now_ms` samples at that time instead of Redis TIME (a test's minutes)."""
        if now_ms is not None and (type(now_ms) is not int or now_ms < 60_000):
            raise ValueError(f"now_ms must be an int of at least 60000 (ms), got {now_ms!r}")
        keys = self.keys
        wrote, next_in = await self._connection.run_script(
            self._connection.scripts.history,
            [keys.history, keys.stats, keys.queued, keys.waiting, keys.processing,
             keys.delayed, keys.dead],
            ["" if now_ms is None else now_ms, HISTORY_MINUTES, *STATS_COUNTERS],
        )  # fmt: skip
        return HistoryStep(bool(wrote), int(next_in) / 1000)

    async def redis_time_ms(self) -> int:
        """Redis TIME in ms (one round trip)."""
        return await redis_time_ms(self._connection)

    async def heartbeat(
        self,
        worker_id: str,
        in_progress: int = 0,
        *,
        leaving: bool = False,
        concurrency: int | None = None,
    ) -> int:
        """Record that `worker_id` is alive with `in_progress` jobs running of at most
        `concurrency` (None: not recorded), or gone, its counts with it; returns the
        Redis time in ms."""
        # bool is an int: a True here is a caller's mistake, not one job.
        if type(in_progress) is not int:
            raise TypeError(f"in_progress must be an int (jobs running), got {in_progress!r}")
        if in_progress < 0:
            raise ValueError(f"in_progress must be >= 0 (jobs running), got {in_progress}")
        if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        prune_ms = int(self._settings.heartbeat_interval * 10 * 1000)
        keys = [self.keys.workers, self.keys.worker_jobs, self.keys.worker_concurrency]
        args: list[str | int] = [worker_id, "leave" if leaving else "beat", prune_ms, in_progress]
        if concurrency is not None or leaving:
            args.append(concurrency or 0)
        else:
            keys.pop()  # the concurrency is not known: leave what is recorded
        return int(
            await self._connection.run_script(self._connection.scripts.heartbeat, keys, args)
        )


class RedisClock:
    """Redis time as this worker last saw it (a claim's or a heartbeat's TIME), carried
    forward on the loop's monotonic clock: the cleanup picks its candidates by it
    without a TIME round trip (its script decides by Redis TIME anyway)."""

    def __init__(self) -> None:
        self._offset: float | None = None  # Redis time minus loop time, seconds

    def saw(self, redis_ms: int, loop_time: float) -> None:
        self._offset = redis_ms / 1000 - loop_time

    def now_ms(self) -> int | None:
        if self._offset is None:
            return None
        return int((asyncio.get_running_loop().time() + self._offset) * 1000)


@dataclass(eq=False)
class ChoreLoop:
    """Runs each chore on its interval until `stopping` is set. Any number of workers
    run them at once: each step is safe to repeat (see Chores)."""

    chores: Chores
    settings: QueueSettings
    _: KW_ONLY
    worker_id: str
    health: RedisHealth
    attempt_log: AttemptLog
    tracing: QueueTracing
    stopping: asyncio.Event
    clock: RedisClock
    running: Callable[[], int]
    on_expired: Callable[[str, str, str], None]
    """Logs one job the cleanup expired: (job_id, trace context, error)."""
    concurrency: int | None = None

    def start(self, keeper: LeaseKeeper) -> list[asyncio.Task[None]]:
        settings, chores = self.settings, self.chores
        every = self._every
        return [
            asyncio.create_task(self._beat(keeper)),
            every(settings.reaper_interval, self.reap, "reaping expired leases"),
            every(settings.promote_interval, chores.promote, "promoting retries"),
            every(settings.cleanup_interval, self.cleanup, "expiring jobs"),
            every(settings.cleanup_interval, chores.prune_kept, "pruning kept jobs"),
            every(settings.heartbeat_interval, self.heartbeat, "heartbeat", always_writes=True),
            # Paced by its own replies: once a minute, just after the minute starts.
            every(settings.heartbeat_interval, self.record_history, "sampling history", paced=True),
        ]

    async def reap(self) -> None:
        report = await self.chores.reap()
        agent_type = self.chores.keys.agent_type
        for job_id, outcome, trace_context in report.ended:
            self.attempt_log.failed(
                job_id=job_id,
                agent_type=agent_type,
                attempt=None,
                max_attempts=None,
                outcome=outcome,
                error=LEASE_EXPIRED,
                trace=self.tracing.creation_log_fields(trace_context, job_id, agent_type),
            )
        for job_id, trace_context in report.cancelled:
            trace = self.tracing.creation_log_fields(trace_context, job_id, agent_type)
            log.info(
                "cancelled job=%s agent_type=%s: its worker was gone (lease expired)%s",
                job_id, agent_type, "".join(f" {name}={value}" for name, value in trace.items()),
                extra={"job_id": job_id, "agent_type": agent_type, **trace},
            )  # fmt: skip
        if report.requeued:
            log.info("reaper: %d job(s) taken but never claimed went back", report.requeued)

    async def cleanup(self) -> None:
        done = await self.chores.expire_due(now_ms=self.clock.now_ms(), on_expired=self._told)
        if done.expired:
            log.info("cleanup expired %d job(s)", len(done.expired))

    def _told(self, step: ExpireReport) -> None:
        """One line per job the cleanup expired, as for a job the claim expires, under
        the trace its producer started; rate-limited with the failed attempts' (a run may
        expire thousands; the run's count is never suppressed)."""
        for job_id, carried in zip(step.expired, step.traces, strict=False):
            self.on_expired(job_id, carried, TTL_EXPIRED)

    async def record_history(self) -> float:
        """One history call; the seconds to wait before the next (just into the next
        minute, when the first worker there writes its sample)."""
        step = await self.chores.record_history()
        return step.next_minute_in + HISTORY_DELAY

    async def heartbeat(self) -> None:
        redis_ms = await self.chores.heartbeat(
            self.worker_id, self.running(), concurrency=self.concurrency
        )
        self.clock.saw(redis_ms, asyncio.get_running_loop().time())
        self.attempt_log.flush()

    async def _beat(self, keeper: LeaseKeeper) -> None:
        """Tell the keeper the loop is alive, every tick (its loop-stall monitor)."""
        while True:
            keeper.beat()
            await asyncio.sleep(keeper.tick)

    def _every(
        self,
        interval: float,
        step: Callable[[], Awaitable[Any]],
        activity: str,
        always_writes: bool = False,
        paced: bool = False,
    ) -> asyncio.Task[None]:
        return asyncio.create_task(self._repeat(interval, step, activity, always_writes, paced))

    async def _repeat(
        self, interval: float, step: Callable[[], Awaitable[Any]], activity: str,
        always_writes: bool, paced: bool,
    ) -> None:  # fmt: skip
        # A chore with nothing to do only reads, which Redis allows at maxmemory: only one
        # that always writes (the heartbeat) may say Redis accepts writes again.
        # A `paced` step returns the seconds to wait before its next run (the history's:
        # once a minute); after a failure the interval applies.
        while not self.stopping.is_set():
            wait = interval
            try:
                done = await step()
                if paced:
                    wait = float(done)
                self.health.ok(wrote=always_writes)
            except CorruptQueueState as exc:
                # A queue key holds another type or a counter does not parse (the script
                # wrote nothing). Reported, and retried: an operator may repair the key.
                self.health.refused(activity, exc, f"retrying every {interval:g}s")
            except TRANSIENT as exc:
                self.health.failed(activity, exc)
            await wait_or_stop(self.stopping, asyncio.sleep(wait))
