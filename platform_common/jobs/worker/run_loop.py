"""Worker: runs one agent type's jobs through a handler, N at a time, reliably.

Reliable fetch (BLMOVE into processing and a claim script with a lease; while the queue
holds jobs, the claim script takes them itself, one round trip), fenced completion
and the chores (reaper, promoter, cleanup, heartbeat) run in this asyncio process; lease
renewal runs on a thread of its own (LeaseKeeper), so a handler that blocks the loop
cannot cost its job the lease. An `async def` handler runs on the loop, a plain `def` in
a pool of `concurrency` threads. Whatever a handler raises ends its attempt as a failure
(retry with backoff, then a dead letter); every deadline comes from Redis TIME. SIGTERM
(via `stop()`) stops fetching, lets running jobs finish for `shutdown_timeout`, then
gives the rest back uncounted."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import Awaitable
from typing import Any

from opentelemetry.trace import TracerProvider
from redis.exceptions import ResponseError

from ..errors import ConfigurationError, CorruptQueueState
from ..queue.backend_errors import TRANSIENT, RedisHealth, backend_errors, is_out_of_memory
from ..queue.connection import QueueConnection
from ..queue.context import Handler
from ..queue.log_text import describe
from ..queue.queue_settings import QueueSettings
from ..queue.tracing import QueueTracing, server_attributes
from ..status import AttemptOutcome, QueueState
from ..validation import is_int
from .attempt_calls import AttemptCalls, Claim, TypeHeldBack, TypePaused
from .attempt_log import AttemptLog, log
from .cancel_watch import CancelWatch
from .chores import ChoreLoop, Chores, RedisClock
from .foreign_entries import ForeignEntries
from .handler_calls import HandlerThreads, is_async_handler
from .lease_keeper import LeaseKeeper
from .settlement import LOST, SHUTDOWN, Attempt, Settlement, wait_or_stop, wake

__all__ = ["Worker"]

NOT_STARTED = "TTL passed: the job was not started within its ttl_seconds"

REFUSED_BACKOFF_SECONDS = 5.0
"""Longest wait between fetches while claiming is refused for corrupt queue state: a try
after a BLMOVE leaves its job in processing (the reaper returns it; a take leaves
nothing), and only a repair helps."""


PAUSED_RECHECK_SECONDS = 1.0
"""How often a worker of a paused agent type asks again (a take, which takes nothing and
writes nothing while the pause lasts): no more often than an idle worker's BLMOVE
returns, so a pause costs Redis no more than an empty queue; it resumes within this."""


CAPPED_RECHECK_SECONDS = 1.0
"""Longest a worker held back by its type's max_running waits before it asks again, when
none of its own jobs ends sooner (a job of its own ending frees a slot it takes at once;
another worker's ending is that worker's to take). As for a pause: no more calls than an
idle worker's BLMOVE."""


CHORE_STOP_SECONDS = 5.0
"""How long a stopping worker waits for its cancelled chores (and the cancel watch's
connection) before it goes on without them."""
FETCH_LINGER_SECONDS = 0.0005
"""Longest a worker with a backlog waits for more of its slots to free before taking
jobs (it waits only while fewer than half are free and jobs run): short jobs then end
close together and are taken and claimed as one batch."""


async def _outcomes_first() -> None:
    """Two turns of the loop, so that the attempts whose slots just freed queue their
    outcomes before a take: the attempt resumes, then its completion batch goes into
    the auto-pipeline, ahead of the take in the same write. The complete script then
    runs first, and the claim finds the lease and expiry sets smaller (ZADD of a batch
    of 32 measured 18 us instead of 39)."""
    for _ in range(2):
        await asyncio.sleep(0)


class Worker:
    """Runs `handler` for the jobs of `agent_type`, at most `concurrency` calls at once.

    A slot is held from the claim until the handler returns; recording the outcome holds
    none, so the next jobs are taken while the last ones' completions are recorded (and
    those, issued close together, share one script call: AttemptCalls.complete)."""

    def __init__(
        self,
        settings: QueueSettings,
        agent_type: str,
        handler: Handler,
        *,
        concurrency: int = 10,
        worker_id: str | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if agent_type not in settings.agent_types:
            raise ConfigurationError("agent_type", f"{agent_type!r} is not in agent_types")
        if not is_int(concurrency) or concurrency < 1:
            raise ConfigurationError("concurrency", f"must be an int >= 1, got {concurrency!r}")
        if not callable(handler):
            raise ConfigurationError("handler", f"must be callable, got {handler!r}")
        self.settings = settings
        self.agent_type = agent_type
        self.handler = handler
        self.handler_is_async = is_async_handler(handler)
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.ready = asyncio.Event()
        """Set once connected, pre-warmed and registered (a heartbeat was written)."""
        # How attempts ended, as Redis recorded them. str() keys, not members: the stop
        # log prints plain names.
        counted = (
            QueueState.SUCCEEDED, AttemptOutcome.RETRYING, AttemptOutcome.DEAD,
            AttemptOutcome.FAILED, QueueState.EXPIRED, AttemptOutcome.RELEASED,
            AttemptOutcome.LOST, QueueState.CANCELLED,
        )  # fmt: skip
        self.counts: dict[str, int] = dict.fromkeys(map(str, counted), 0)
        self.attempt_log = AttemptLog(log)
        """One WARNING per failed attempt, rate-limited per agent type (replaceable)."""
        self.health = RedisHealth(log, settings.redis)
        """Redis outages: one line when one starts, one when it ends."""
        self._tracing = QueueTracing(
            tracer_provider, server=server_attributes(settings.redis), client_id=self.worker_id
        )
        self.keeper: LeaseKeeper | None = None
        self._stopping = asyncio.Event()
        self._busy = 0  # slots held (see Attempt.holds_slot)
        self._slot_waiter: asyncio.Future[None] | None = None  # the fetch loop's, when full
        self._running: dict[str, Attempt] = {}  # by lease token: unique per attempt
        self._threads: HandlerThreads | None = None
        self._redis_clock = RedisClock()
        self._expect_more = False
        """The last claim left jobs on the queue: the next one takes them itself (one
        round trip, AttemptCalls.take). The first fetch waits with BLMOVE, as on an empty queue."""
        self._retake: list[str] | None = None  # the tokens of a take that failed
        self._last_take: str | None = None  # the first token of the last take answered
        self._foreign: ForeignEntries | None = None
        self._paused = False
        """The last claim found the agent type paused (JobQueue.pause)."""
        self._held_back: set[str] = set()
        """The limits that have held this worker's claims back (each logged once: a rate
        holds a worker back between most of its claims)."""
        self._cancel_watch: CancelWatch | None = None
        self._token_prefix = os.urandom(4).hex()
        self._token_counter = itertools.count()

    @property
    def trace_context_dropped(self) -> dict[str, int]:
        """Stored trace contexts (or parts) this worker dropped, by cause: ones it would
        not parse (too long, not a flat JSON object of strings) and what lay beyond W3C's
        limits (see queue.trace_context). Each drop is also logged, rate-limited."""
        return self._tracing.dropped

    @property
    def foreign_entries(self) -> int:
        """Entries of the queue list with no job behind them (an id pushed without the
        enqueue script, docs/protocol.md) this worker dropped; each is logged, as a
        WARNING rate-limited to one line a minute (worker/foreign_entries.py)."""
        return self._foreign.count if self._foreign is not None else 0

    def stop(self) -> None:
        """Ask the worker to stop gracefully (safe from a signal handler)."""
        self._stopping.set()
        wake(self._slot_waiter)

    async def run(self) -> None:
        """Connect, work until `stop()`, then shut down gracefully and disconnect.

        BackendUnavailable (naming the redacted URL) if Redis cannot be reached at the
        start; later outages are waited out, and so is a Redis at maxmemory refusing
        writes (noeviction), at the start too."""
        settings = self.settings
        with backend_errors(settings.redis):
            connection = await QueueConnection.open(settings)
        blocking = connection.blocking_client()
        self._connection = connection
        self._blocking = blocking
        self._leases = AttemptCalls(connection, self.agent_type)
        self._chores = Chores(connection, self.agent_type)
        self._chore_loop = ChoreLoop(
            self._chores, settings, worker_id=self.worker_id, health=self.health,
            attempt_log=self.attempt_log, tracing=self._tracing, stopping=self._stopping,
            clock=self._redis_clock,
            running=lambda: len(self._running), on_expired=self._log_expired_job,
            concurrency=self.concurrency,
        )  # fmt: skip
        self._keys = self._leases.keys
        self._foreign = ForeignEntries(connection, self._keys, log)
        loop = asyncio.get_running_loop()
        keeper = self.keeper = LeaseKeeper(
            settings, self.agent_type, loop=loop, on_lost=self._lease_lost,
            health=self.health, logger=log,
        )  # fmt: skip
        if not self.handler_is_async:
            self._threads = HandlerThreads(self.concurrency, f"handler-{self.agent_type}")
        self._settlement = Settlement(
            settings=settings, agent_type=self.agent_type, handler=self.handler,
            handler_is_async=self.handler_is_async, worker_id=self.worker_id,
            connection=connection, calls=self._leases, keeper=keeper, threads=self._threads,
            tracing=self._tracing, counts=self.counts, attempt_log=self.attempt_log,
            health=self.health, stopping=self._stopping, on_handler_end=self._handler_ended,
        )  # fmt: skip
        chores: list[asyncio.Task[None]] = []
        try:
            if not await self._register():
                return  # stopped while Redis refused writes
            # cancel: one XREAD BLOCK loop on the type's control stream (queue/cancel.py),
            # from its last entry before this worker says it is ready
            watch = CancelWatch(connection, self._keys, self.health, self._cancel)
            self._cancel_watch = watch
            chores.append(asyncio.create_task(watch.run(await watch.first_id())))
            keeper.start()
            self.ready.set()
            log.info(
                "worker ready id=%s agent_type=%s concurrency=%d handler=%s redis=%s",
                self.worker_id, self.agent_type, self.concurrency,
                "async" if self.handler_is_async else "sync (threads)", self.health.where,
            )  # fmt: skip
            chores += self._chore_loop.start(keeper)
            await self._fetch_loop()
        finally:
            await self._drain()
            for task in chores:
                task.cancel()
            # Bounded: a chore stuck in a client call that does not give up on
            # cancellation (seen once, after a cluster failover) must not keep the
            # worker from stopping; it is left behind, said once.
            if chores:
                _, stuck = await asyncio.wait(chores, timeout=CHORE_STOP_SECONDS)
                if stuck:
                    log.warning("worker %s: %d chore(s) still running %.0f s after being "
                                "cancelled; stopping without them", self.worker_id,
                                len(stuck), CHORE_STOP_SECONDS)  # fmt: skip
            await asyncio.to_thread(keeper.stop)
            if self._threads is not None:
                self._threads.shutdown()
            if self.ready.is_set():
                try:
                    await self._chores.heartbeat(self.worker_id, leaving=True)
                except TRANSIENT as exc:
                    log.debug("could not say goodbye: %s", describe(exc))
            if self._cancel_watch is not None:
                try:
                    await asyncio.wait_for(self._cancel_watch.aclose(), CHORE_STOP_SECONDS)
                except TimeoutError:
                    log.warning("worker %s: the cancel watch's connection did not close "
                                "within %.0f s", self.worker_id, CHORE_STOP_SECONDS)  # fmt: skip
            await blocking.aclose()
            await connection.aclose()
            self.attempt_log.flush(final=True)
            self.health.report_ongoing()
            log.info("worker stopped id=%s counts=%s", self.worker_id, self.counts)

    def _cancel(self, job_id: str, reason: str) -> None:
        """A cancel request on the control stream: tell this worker's attempt of
        `job_id`, if it runs one (the stream carries every worker's jobs)."""
        for attempt in list(self._running.values()):
            if attempt.claim.job_id == job_id and not attempt.settled:
                attempt.cancel(reason)

    async def _register(self) -> bool:
        """Register the agent type and write the first heartbeat. While Redis is at
        maxmemory (noeviction refuses the writes) this is retried, logged once as a
        condition, until memory is freed: True then, False if stop() came first. An
        unreachable Redis raises BackendUnavailable, as at connect."""
        delay = 0.05
        while True:
            try:
                with backend_errors(self.settings.redis):
                    await self._connection.register_type(self.agent_type)
                    await self._chore_loop.heartbeat()
            except TRANSIENT as exc:
                if not is_out_of_memory(exc):
                    raise
                self.health.failed("registering the worker", exc)
                await self._wait_any(asyncio.sleep(delay))
                if self._stopping.is_set():
                    return False
                delay = min(delay * 2, 2.0)
                continue
            self.health.ok()
            return True

    # -- fetching ------------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        delay = 0.05
        # With a backlog, a take waits for half the slots (or FETCH_LINGER_SECONDS): one
        # claim of many jobs costs Redis less per job than several small ones.
        batch = max(1, min(self.concurrency, self.settings.fetch_batch) // 2)
        linger_until: float | None = None
        while not self._stopping.is_set():
            free = self.concurrency - self._busy
            if free <= 0:
                await self._slot_freed()
                continue
            if self._expect_more and self._busy and free < batch:
                if linger_until is None:
                    linger_until = loop.time() + FETCH_LINGER_SECONDS
                if loop.time() < linger_until:
                    await self._slot_freed(linger_until)
                    continue
            linger_until = None
            taken: list[str] = []
            expired: list[tuple[str, str]] = []
            skipped: list[str] = []
            try:
                want = min(free, self.settings.fetch_batch)
                if self._expect_more:
                    # The queue had jobs: take and claim them in one script call. After
                    # a call that failed, the same call again (it may have run: its
                    # replay hands back what it took).
                    if self._running:  # attempts that may be recording their outcome
                        await _outcomes_first()
                    tokens = self._retake or [self._new_token() for _ in range(want)]
                    self._retake = tokens
                    remaining, claims = await self._leases.take(
                        self.worker_id, tokens, self._last_take, expired, skipped
                    )
                    self._retake = None
                    self._last_take = tokens[0]
                else:
                    taken = await self._take()
                    remaining, claims = 0, []
                    if taken:
                        remaining, claims = await self._leases.claim(
                            self.worker_id,
                            [(job_id, self._new_token()) for job_id in taken],
                            expired,
                            skipped,
                        )
                self.health.ok()
                if self._paused:
                    self._paused = False
                    log.info("agent type %s resumed: taking jobs again (id=%s)",
                             self.agent_type, self.worker_id)  # fmt: skip
                received = loop.time()
                self._expect_more = remaining > 0
                for claim in claims:
                    self._start(claim, received)
                for job_id, trace_context in expired:
                    self._log_expired_job(job_id, trace_context)
                if skipped and self._foreign is not None:
                    await self._foreign.check(skipped)
                delay = 0.05
            except TypePaused:
                # Nothing was started (a job BLMOVE took went back); running attempts go
                # on. The next try is a take, which writes nothing while paused.
                self.health.ok()
                self._retake = None  # a paused take wrote no marker: its tokens are unused
                self._expect_more = True
                if not self._paused:
                    self._paused = True
                    log.info(
                        "agent type %s is paused: taking no jobs until it is resumed, "
                        "%d running finish (id=%s)", self.agent_type, len(self._running),
                        self.worker_id,
                    )  # fmt: skip
                await self._wait_any(asyncio.sleep(PAUSED_RECHECK_SECONDS))
            except TypeHeldBack as held:
                # The type's limits (queue.limits) allow no start now; nothing was written
                # (a job BLMOVE took went back). Sleep until the claim said the next start
                # is allowed (rate), or until a job of this worker ends (max_running), and
                # ask again with a take: no polling in between.
                self.health.ok()
                self._retake = None  # a held-back take wrote no marker
                self._expect_more = True
                if held.limit not in self._held_back:
                    self._held_back.add(held.limit)
                    log.info("agent type %s is held back by its %s (logged once per "
                             "worker): %d running (id=%s)",
                             self.agent_type, held.limit, len(self._running),
                             self.worker_id)  # fmt: skip
                if held.wait is not None:
                    await self._wait_any(asyncio.sleep(held.wait))
                else:
                    await self._wait_any(self._slot_freed(loop.time() + CAPPED_RECHECK_SECONDS))
            except CorruptQueueState as exc:
                # The claim refused before writing anything: a job BLMOVE took stays in
                # processing, where the reaper finds it (provisional lease) and returns
                # it; a take took nothing. Nothing to do here but wait for a repair.
                stay = (
                    f"the {len(taken)} job(s) just taken stay in the processing list, where "
                    "the reaper returns them; " if taken else ""
                )  # fmt: skip
                self.health.refused(
                    "claiming jobs", exc, f"{stay}retrying with backoff until the key is repaired"
                )
                await self._wait_any(asyncio.sleep(delay))
                delay = min(delay * 2, REFUSED_BACKOFF_SECONDS)
            except TRANSIENT as exc:
                # Redis restarted or the connection was killed: back off and go on; a job
                # taken but not claimed is found by the reaper (provisional lease), and
                # a take that may have run is sent again as it was (self._retake).
                self.health.failed("fetching jobs", exc)
                await self._wait_any(asyncio.sleep(delay))
                delay = min(delay * 2, 2.0)

    async def _slot_freed(self, deadline: float | None = None) -> None:
        """Wait until a slot is freed, stop() is called or the loop's clock reaches
        `deadline`: one future, no task per wait."""
        loop = asyncio.get_running_loop()
        waiter = self._slot_waiter = loop.create_future()
        timer = loop.call_at(deadline, wake, waiter) if deadline is not None else None
        try:
            await waiter
        finally:
            self._slot_waiter = None
            if timer is not None:
                timer.cancel()

    async def _take(self) -> list[str]:
        """Wait for a job (the queue was empty): one BLMOVE into processing on our own
        connection. While the queue has jobs, the claim takes them itself (AttemptCalls.take)."""
        keys = self._keys
        moved = [keys.queue, keys.processing]
        # Redis takes a fractional block timeout; redis-py's stub says int.
        timeout: Any = self.settings.block_timeout
        try:
            job_id = await self._blocking.blmove(
                keys.queue, keys.processing, timeout, "RIGHT", "LEFT"
            )
        except ResponseError as exc:
            raise await self._connection.refusal(exc, moved) from exc
        return [job_id] if job_id is not None else []

    def _log_expired_job(self, job_id: str, trace_context: str, error: str = NOT_STARTED) -> None:
        """The claim (or the cleanup: `error`) expired this job instead of running it to
        its end (its TTL had passed): one line, rate-limited with the failed attempts',
        under the producer's trace (no attempt of it runs here). Not counted: no attempt
        ended."""
        self.attempt_log.failed(
            job_id=job_id,
            agent_type=self.agent_type,
            attempt=None,
            max_attempts=None,
            outcome=QueueState.EXPIRED,
            error=error,
            trace=self._tracing.creation_log_fields(trace_context, job_id, self.agent_type),
        )

    def _new_token(self) -> str:
        return f"{self._token_prefix}{next(self._token_counter):x}"

    def _start(self, claim: Claim, received: float) -> None:
        # The TTL left by Redis's clock, counted on ours from when the claim's reply came:
        # never early (Redis ran the claim before we read its reply), never skewed.
        left = (claim.expires_at_ms - claim.redis_now_ms) / 1000
        attempt = Attempt(claim, received + left)
        if claim.redis_now_ms:
            self._redis_clock.saw(claim.redis_now_ms, received)
        assert self.keeper is not None
        self.keeper.hold(claim.job_id, claim.token)
        attempt.holds_slot = True
        self._busy += 1
        attempt.task = asyncio.create_task(self._run_job(attempt))
        self._running[claim.token] = attempt

    def _free_slot(self, attempt: Attempt) -> None:
        """The attempt's slot is free again: its handler returned (or never started).
        Recording its outcome takes no slot, so the next jobs are fetched meanwhile."""
        if attempt.holds_slot:
            attempt.holds_slot = False
            self._busy -= 1
            wake(self._slot_waiter)

    def _handler_ended(self, attempt: Attempt) -> None:
        """The handler call returned (its future is done): the attempt may go on."""
        attempt.ended = True
        wake(attempt.end_waiter)
        self._free_slot(attempt)
        wake(attempt.waiter)

    # -- running one job -----------------------------------------------------------
    async def _run_job(self, attempt: Attempt) -> None:
        try:
            await self._settlement.run(attempt)
        finally:
            self._running.pop(attempt.claim.token, None)
            if attempt.handler is None or attempt.ended:
                self._free_slot(attempt)
            # else the handler still runs (the worker stops): its end frees the slot

    def _lease_lost(self, job_id: str, token: str) -> None:
        """From the lease keeper: renewal was refused for this attempt."""
        attempt = self._running.get(token)
        # Only the attempt renewed is lost: by now it may have ended and this worker may
        # hold the job's next attempt (same job id, another token).
        if attempt is None or attempt.settled or attempt.reason is not None:
            return
        # Counted and logged when the attempt is recorded (_record), once Redis said
        # where the job is now; the handler is cancelled at once.
        attempt.abort(LOST)

    # -- chores --------------------------------------------------------------------
    async def _wait_any(self, awaitable: Awaitable[Any]) -> None:
        """Wait for `awaitable` or for stop(), whichever comes first."""
        await wait_or_stop(self._stopping, awaitable)

    # -- shutdown ------------------------------------------------------------------
    async def _drain(self) -> None:
        """When stopping, let running jobs finish for shutdown_timeout; give the rest back
        uncounted (at once if run() was cancelled rather than stopped)."""
        attempts = list(self._running.values())
        tasks = [attempt.task for attempt in attempts if attempt.task is not None]
        if not tasks:
            return
        if self._stopping.is_set():
            log.info("stopping: waiting for %d running job(s)", len(tasks))
            await asyncio.wait(tasks, timeout=self.settings.shutdown_timeout)
        for attempt in attempts:
            attempt.abort(SHUTDOWN)
        late = [task for task in tasks if not task.done()]
        if late:
            await asyncio.wait(late)
