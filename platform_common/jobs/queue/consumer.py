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
import contextvars
import itertools
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.trace import TracerProvider
from redis.exceptions import ResponseError

from ..errors import ConfigurationError, CorruptQueueState, LeaseLost
from ..status import AttemptOutcome, QueueState
from ..validation import is_int
from .attempt_log import AttemptLog, bounded, describe, format_traceback
from .backend_errors import (
    TRANSIENT,
    RedisHealth,
    backend_errors,
    is_out_of_memory,
    is_script_error,
)
from .connection import QueueConnection
from .context import Handler, JobContext, NonRetryableError, set_current_job
from .expiry import ExpireReport
from .handler_calls import (
    HandlerThreads,
    Outcome,
    Raised,
    Returned,
    is_async_handler,
    start_handler,
)
from .lease_keeper import LeaseKeeper
from .leases import LOST_EXPIRED, MAX_ERROR_LENGTH, Claim, Leases
from .maintenance import LEASE_EXPIRED, Maintenance
from .payload import JobPayload
from .queue_settings import QueueSettings
from .results import ResultTooLarge
from .tracing import NO_TRACE, QueueTracing, Settle, server_attributes

__all__ = ["Worker"]

log = logging.getLogger("platform_common.jobs.queue.consumer")

# Why the worker itself ended an attempt (None: the handler ended it).
_LOST = "lost"  # renewal was refused: the job belongs to someone else now
_SHUTDOWN = "shutdown"  # the worker is stopping: the attempt goes back uncounted
_TTL = "ttl"  # the job's TTL passed (by Redis's clock) before the handler finished

TTL_PASSED = "TTL passed: the job did not finish within its ttl_seconds"
EXPIRED_ELSEWHERE = f"{TTL_PASSED} (expired by a cleanup while it ran)"
NOT_STARTED = "TTL passed: the job was not started within its ttl_seconds"
TTL_EXPIRED = "TTL passed: the cleanup expired the job (not started or not finished in time)"

REFUSED_BACKOFF_SECONDS = 5.0
"""Longest wait between fetches while claiming is refused for corrupt queue state: a try
after a BLMOVE leaves its job in processing (the reaper returns it; a take leaves
nothing), and only a repair helps."""


FETCH_LINGER_SECONDS = 0.0005
"""Longest a worker with a backlog waits for more of its slots to free before taking
jobs (it waits only while fewer than half are free and jobs run): short jobs then end
close together and are taken and claimed as one batch."""


class CorruptJob(Exception):
    """The stored job cannot be run (its payload or a field does not parse)."""


class _Attempt:
    """One attempt this worker runs: its claim, its handler call and how it ended."""

    __slots__ = (
        "claim", "deadline", "end_waiter", "ended", "handler", "holds_slot", "reason",
        "settled", "task", "trace", "waiter",
    )  # fmt: skip

    def __init__(self, claim: Claim, deadline: float) -> None:
        self.claim = claim
        self.deadline = deadline
        """The job's TTL on the loop's (monotonic) clock, from the claim's Redis TIME."""
        self.reason: str | None = None
        self.ended = False
        """The handler call really returned."""
        self.end_waiter: asyncio.Future[None] | None = None
        """Done when it does, for a worker that waits for that (see Worker._linger)."""
        self.handler: asyncio.Future[Outcome] | None = None
        self.waiter: asyncio.Future[None] | None = None
        """Done when the handler returned, the attempt was aborted or its TTL passed."""
        self.holds_slot = False
        """One of the worker's `concurrency` slots is this attempt's until its handler
        returned (or, when none was started, until the attempt ended)."""
        self.settled = False
        self.task: asyncio.Task[None] | None = None
        self.trace = NO_TRACE
        """Its process span and the trace ids its log lines carry (see queue.tracing)."""

    def abort(self, reason: str) -> None:
        """End the attempt for `reason` (the first reason given stands)."""
        if self.reason is None:
            self.reason = reason
        _wake(self.waiter)
        if self.handler is not None:
            self.handler.cancel()  # a coroutine is cancelled; a thread runs on regardless


async def _outcomes_first() -> None:
    """Two turns of the loop, so that the attempts whose slots just freed queue their
    outcomes before a take: the attempt resumes, then its completion batch goes into
    the auto-pipeline, ahead of the take in the same write. The complete script then
    runs first, and the claim finds the lease and expiry sets smaller (ZADD of a batch
    of 32 measured 18 us instead of 39)."""
    for _ in range(2):
        await asyncio.sleep(0)


def _wake(waiter: asyncio.Future[None] | None, *_: object) -> None:
    """Resolve `waiter` unless it is already done (any of several events may come first)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


_RESULT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""How a handler's return value is stored (one encoder: json.dumps with options builds a
new one per call)."""


class Worker:
    """Runs `handler` for the jobs of `agent_type`, at most `concurrency` calls at once.

    A slot is held from the claim until the handler returns; recording the outcome holds
    none, so the next jobs are taken while the last ones' completions are recorded (and
    those, issued close together, share one script call: Leases.complete)."""

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
            AttemptOutcome.LOST,
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
        self._busy = 0  # slots held (see _Attempt.holds_slot)
        self._slot_waiter: asyncio.Future[None] | None = None  # the fetch loop's, when full
        self._running: dict[str, _Attempt] = {}  # by lease token: unique per attempt
        self._threads: HandlerThreads | None = None
        self._redis_offset: float | None = None  # Redis time minus loop time, seconds
        self._expect_more = False
        """The last claim left jobs on the queue: the next one takes them itself (one
        round trip, Leases.take). The first fetch waits with BLMOVE, as on an empty queue."""
        self._retake: list[str] | None = None  # the tokens of a take that failed
        self._last_take: str | None = None  # the first token of the last take answered
        self._token_prefix = os.urandom(4).hex()
        self._token_counter = itertools.count()

    @property
    def trace_context_dropped(self) -> dict[str, int]:
        """Stored trace contexts (or parts) this worker dropped, by cause: ones it would
        not parse (too long, not a flat JSON object of strings) and what lay beyond W3C's
        limits (see queue.trace_context). Each drop is also logged, rate-limited."""
        return self._tracing.dropped

    def stop(self) -> None:
        """Ask the worker to stop gracefully (safe from a signal handler)."""
        self._stopping.set()
        _wake(self._slot_waiter)

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
        self._leases = Leases(connection, self.agent_type)
        self._chores = Maintenance(connection, self.agent_type)
        self._keys = self._leases.keys
        loop = asyncio.get_running_loop()
        keeper = self.keeper = LeaseKeeper(
            settings, self.agent_type, loop=loop, on_lost=self._lease_lost,
            health=self.health, logger=log,
        )  # fmt: skip
        if not self.handler_is_async:
            self._threads = HandlerThreads(self.concurrency, f"handler-{self.agent_type}")
        chores: list[asyncio.Task[None]] = []
        try:
            if not await self._register():
                return  # stopped while Redis refused writes
            keeper.start()
            self.ready.set()
            log.info(
                "worker ready id=%s agent_type=%s concurrency=%d handler=%s redis=%s",
                self.worker_id, self.agent_type, self.concurrency,
                "async" if self.handler_is_async else "sync (threads)", self.health.where,
            )  # fmt: skip
            chores = [
                asyncio.create_task(self._beat(keeper)),
                self._chore(settings.reaper_interval, self._reap, "reaping expired leases"),
                self._chore(settings.promote_interval, self._chores.promote, "promoting retries"),
                self._chore(settings.cleanup_interval, self._cleanup, "expiring jobs"),
                self._chore(
                    settings.cleanup_interval, self._chores.prune_kept, "pruning kept jobs"
                ),
                self._chore(
                    settings.heartbeat_interval, self._heartbeat, "heartbeat", always_writes=True
                ),
            ]
            await self._fetch_loop()
        finally:
            await self._drain()
            for task in chores:
                task.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            await asyncio.to_thread(keeper.stop)
            if self._threads is not None:
                self._threads.shutdown()
            if self.ready.is_set():
                try:
                    await self._chores.heartbeat(self.worker_id, leaving=True)
                except TRANSIENT as exc:
                    log.debug("could not say goodbye: %s", describe(exc))
            await blocking.aclose()
            await connection.aclose()
            self.attempt_log.flush(final=True)
            self.health.report_ongoing()
            log.info("worker stopped id=%s counts=%s", self.worker_id, self.counts)

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
                    await self._heartbeat()
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
                        self.worker_id, tokens, self._last_take, expired
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
                        )
                self.health.ok()
                received = loop.time()
                self._expect_more = remaining > 0
                for claim in claims:
                    self._start(claim, received)
                for job_id, trace_context in expired:
                    self._log_expired_job(job_id, trace_context)
                delay = 0.05
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
        timer = loop.call_at(deadline, _wake, waiter) if deadline is not None else None
        try:
            await waiter
        finally:
            self._slot_waiter = None
            if timer is not None:
                timer.cancel()

    async def _take(self) -> list[str]:
        """Wait for a job (the queue was empty): one BLMOVE into processing on our own
        connection. While the queue has jobs, the claim takes them itself (Leases.take)."""
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
        attempt = _Attempt(claim, received + left)
        if claim.redis_now_ms:
            self._redis_offset = claim.redis_now_ms / 1000 - received
        assert self.keeper is not None
        self.keeper.hold(claim.job_id, claim.token)
        attempt.holds_slot = True
        self._busy += 1
        attempt.task = asyncio.create_task(self._run_job(attempt))
        self._running[claim.token] = attempt

    def _free_slot(self, attempt: _Attempt) -> None:
        """The attempt's slot is free again: its handler returned (or never started).
        Recording its outcome takes no slot, so the next jobs are fetched meanwhile."""
        if attempt.holds_slot:
            attempt.holds_slot = False
            self._busy -= 1
            _wake(self._slot_waiter)

    def _handler_ended(self, attempt: _Attempt) -> None:
        """The handler call returned (its future is done): the attempt may go on."""
        attempt.ended = True
        _wake(attempt.end_waiter)
        self._free_slot(attempt)
        _wake(attempt.waiter)

    # -- running one job -----------------------------------------------------------
    async def _run_job(self, attempt: _Attempt) -> None:
        claim = attempt.claim
        try:
            # In the try: whatever fails here is logged and frees the slot and the lease,
            # rather than leaving the job leased until its TTL with no line at all.
            job_trace = attempt.trace = self._tracing.process(
                self.agent_type, claim.job_id, claim.attempt, claim.max_attempts,
                claim.trace_context,
            )  # fmt: skip
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "started job=%s agent_type=%s attempt=%d/%d%s",
                    claim.job_id, self.agent_type, claim.attempt, claim.max_attempts,
                    job_trace.log_text(), extra=self._job_fields(attempt),
                )  # fmt: skip
            outcome = await self._outcome(attempt)
            await self._record(attempt, outcome)
            job_trace.end()
            attempt.settled = True
            self._drop_lease(claim)
            await self._linger(attempt)
        except asyncio.CancelledError:
            # run() itself was cancelled (the worker's own shutdown aborts instead).
            attempt.abort(_SHUTDOWN)
            if not attempt.settled:
                await self._release(attempt)
            raise
        except Exception:
            # A bug of ours, not the handler's: say so; the lease then lapses and the
            # reaper retries the job.
            log.exception(
                "internal error running job=%s%s", claim.job_id, attempt.trace.log_text(),
                extra=self._job_fields(attempt),
            )  # fmt: skip
        finally:
            attempt.trace.end()
            attempt.settled = True
            self._drop_lease(claim)
            self._running.pop(claim.token, None)
            if attempt.handler is None or attempt.ended:
                self._free_slot(attempt)
            # else the handler still runs (the worker stops): its end frees the slot

    def _drop_lease(self, claim: Claim) -> None:
        if self.keeper is not None:
            self.keeper.drop(claim.token)

    async def _outcome(self, attempt: _Attempt) -> Outcome | None:
        """Run the handler until it ends, the TTL passes or the worker aborts the
        attempt; its outcome, or None when the worker ended it (see attempt.reason)."""
        claim = attempt.claim
        if claim.problem is not None:
            return Raised(CorruptJob(claim.problem))
        try:
            payload = JobPayload.from_json(claim.payload)
        except Exception as exc:
            corrupt = CorruptJob(f"payload does not parse: {describe(exc)}")
            corrupt.__cause__ = exc
            return Raised(corrupt)
        context = JobContext(
            claim.job_id, self.agent_type, claim.attempt, claim.max_attempts,
            claim.expires_at_ms / 1000, self.worker_id, attempt.deadline,
        )  # fmt: skip
        if attempt.reason is not None:
            return None  # aborted before it started (its lease was lost meanwhile)
        # One future for whichever comes first: the handler's end (_handler_ended),
        # abort(), the TTL (the timer below).
        loop = asyncio.get_running_loop()
        waiter = attempt.waiter = loop.create_future()
        job_context = contextvars.copy_context()
        job_context.run(set_current_job, context)
        if attempt.trace.recording:
            job_context.run(attempt.trace.enter)
        handler = attempt.handler = start_handler(
            self.handler,
            payload,
            run_async=self.handler_is_async,
            context=job_context,
            threads=self._threads,
            # What the loop monitor names when this call blocks the event loop.
            name=f"job={claim.job_id} attempt={claim.attempt}/{claim.max_attempts}",
            on_end=lambda: self._handler_ended(attempt),
        )
        timer = loop.call_at(attempt.deadline, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
        if attempt.reason is None and handler.done() and not handler.cancelled():
            return handler.result()
        # Cancelled by someone else than us: asyncio.run ending, i.e. the worker stopping.
        attempt.abort(_SHUTDOWN if handler.cancelled() else _TTL)
        return None

    async def _record(self, attempt: _Attempt, outcome: Outcome | None) -> None:
        """Record how the attempt ended, fenced by its lease, and count and log it."""
        reason = attempt.reason
        if reason == _LOST:
            # Renewal was refused (the handler is cancelled): say where the job is, so a
            # job another worker's cleanup expired is counted and logged as expired.
            state = await self._lost_state(attempt)
            self._lost(attempt, f"renewal refused (job is {state}); handler cancelled", state)
            return
        if reason == _SHUTDOWN:
            await self._release(attempt)
            return
        if reason == _TTL:
            await self._expire(attempt)
            return
        assert outcome is not None
        if isinstance(outcome, Raised):
            error = outcome.error
            attempt.trace.failed(error)
            mode = (
                "corrupt" if isinstance(error, CorruptJob)
                else "fatal" if isinstance(error, NonRetryableError)
                else "error"
            )  # fmt: skip
            await self._fail(attempt, error, mode)
            return
        await self._complete(attempt, outcome)

    async def _complete(self, attempt: _Attempt, outcome: Returned) -> None:
        claim = attempt.claim
        try:
            result_json = _RESULT_ENCODER.encode(outcome.value)
        except Exception as exc:  # TypeError, ValueError, RecursionError, a broken default
            error = f"result is not JSON-serialisable: {describe(exc)}"
            attempt.trace.failed(exc)
            await self._fail(attempt, exc, "fatal", error=error)
            return
        # ASCII (the encoder escapes the rest): its length is its size in bytes.
        if len(result_json) > self.settings.max_result_bytes:
            too_large = ResultTooLarge(len(result_json), self.settings.max_result_bytes)
            attempt.trace.failed(too_large)
            await self._fail(attempt, too_large, "fatal")
            return

        async def complete() -> str:
            await self._leases.complete(claim.job_id, claim.token, result_json)
            return QueueState.SUCCEEDED

        try:
            with attempt.trace.settle("complete") as settle:
                recorded = await self._settle(attempt, complete)
                if recorded is not None:
                    settle.outcome(recorded)
        except TRANSIENT as exc:  # only a script error gets here (_settle retries the rest)
            # The complete script could not read the job's record: a stored field is
            # corrupt. Retrying cannot help; record that instead of letting the lease lapse.
            error = f"recording the result failed on the stored job: {describe(exc)}"
            await self._fail(attempt, exc, "corrupt", error=error)
            return
        if recorded is not None:
            self.counts[QueueState.SUCCEEDED] += 1

    async def _fail(
        self, attempt: _Attempt, exc: BaseException, mode: str, *, error: str | None = None
    ) -> None:
        claim = attempt.claim
        error = bounded(error or describe(exc), MAX_ERROR_LENGTH)
        trace = format_traceback(exc)
        # The failures-by-class breakdown counts the handler's exception class; a corrupt
        # stored job is counted as such (error_class derives it), not as a script error.
        error_class = None if mode == "corrupt" else type(exc).__name__

        async def fail() -> str:
            return await self._leases.fail(
                claim.job_id,
                claim.token,
                error,
                mode=mode,
                traceback=trace,
                error_class=error_class,
            )

        try:
            with attempt.trace.settle("fail") as settle:
                outcome = await self._settle(attempt, fail)
                if outcome is not None:
                    settle.outcome(outcome)
        except CorruptQueueState as refusal:
            self._unrecorded(attempt, refusal, f"its attempt failed with {error}")
            return
        if outcome is not None:
            self._count(outcome)
        self.attempt_log.failed(
            job_id=claim.job_id,
            agent_type=self.agent_type,
            attempt=claim.attempt or None,
            max_attempts=claim.max_attempts or None,
            outcome=str(outcome) if outcome is not None else "unrecorded",
            error=error,
            exc=exc,
            trace=attempt.trace.log_fields(),
        )

    async def _release(self, attempt: _Attempt) -> None:
        """Give the attempt back uncounted (the worker stops before the job finished)."""
        claim = attempt.claim

        async def release() -> str:
            error = "worker shut down before the job finished"
            return await self._leases.fail(claim.job_id, claim.token, error, mode="release")

        try:
            with attempt.trace.settle("release") as settle:
                outcome = await self._settle(attempt, release)
                if outcome is not None:
                    settle.outcome(outcome)
        except CorruptQueueState as exc:
            self._unrecorded(attempt, exc, "the worker stops before it finished")
            return
        if outcome is not None:
            self._count(outcome)
            log.info(
                "released job=%s%s: the worker stops before it finished",
                claim.job_id, attempt.trace.log_text(), extra=self._job_fields(attempt),
            )  # fmt: skip

    async def _expire(self, attempt: _Attempt) -> None:
        """Expire the job at its TTL (the handler was cancelled, or its thread left to
        finish on its own). The script decides by Redis TIME, like the deadline did."""
        with attempt.trace.settle("expire") as settle:
            await self._expire_job(attempt, settle)

    async def _expire_job(self, attempt: _Attempt, settle: Settle) -> None:
        claim = attempt.claim
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.settings.lease_seconds
        while True:
            try:
                expired = await self._settle(attempt, lambda: self._leases.expire([claim.job_id]))
            except CorruptQueueState as exc:
                self._unrecorded(attempt, exc, "its TTL passed")
                return
            if expired is None:
                return
            if expired:
                self.counts[QueueState.EXPIRED] += 1
                error = TTL_PASSED
                settle.outcome(QueueState.EXPIRED)
                attempt.trace.outcome(QueueState.EXPIRED, error=error)
                self.attempt_log.failed(
                    job_id=claim.job_id,
                    agent_type=self.agent_type,
                    attempt=claim.attempt,
                    max_attempts=claim.max_attempts,
                    outcome=QueueState.EXPIRED,
                    error=error,
                    trace=attempt.trace.log_fields(),
                )
                return
            # Not expired by this call: already settled elsewhere (another worker's
            # cleanup), or Redis's clock has not reached the TTL yet (it stepped back).
            if not await self._still_mine(claim):
                # Said as a lost lease is: where the job is now (expired, most likely).
                state = await self._lost_state(attempt)
                self._lost(attempt, f"its TTL passed and the job is {state}", state)
                return
            if loop.time() > give_up:
                return
            await asyncio.sleep(0.05)

    async def _still_mine(self, claim: Claim) -> bool:
        try:
            state, token = await self._connection.client.hmget(
                self._keys.job(claim.job_id), ["state", "token"]
            )  # type: ignore[misc]
        except TRANSIENT as exc:
            self.health.failed("reading a job", exc)
            return True
        return bool(state == QueueState.RUNNING and token == claim.token)

    async def _linger(self, attempt: _Attempt) -> None:
        """Keep the attempt running (shutdown waits for it; its slot stays taken) while its
        handler still runs after the attempt ended (a thread cannot be cancelled; a
        coroutine may ignore it), unless stopping."""
        if attempt.handler is None or attempt.ended or attempt.reason == _SHUTDOWN:
            return  # (no handler: the stored job did not parse, nothing was started)
        log.debug(
            "job=%s%s: waiting for its handler to return",
            attempt.claim.job_id, attempt.trace.log_text(), extra=self._job_fields(attempt),
        )  # fmt: skip
        attempt.end_waiter = asyncio.get_running_loop().create_future()
        await self._wait_any(attempt.end_waiter)

    def _count(self, outcome: str) -> None:
        # fail() reports where the job went (retrying, dead, failed, released), or for a
        # replay the state the first call left it in.
        if outcome in self.counts:
            self.counts[outcome] += 1

    async def _settle(
        self, attempt: _Attempt, operation: Callable[[], Awaitable[Any]]
    ) -> Any | None:
        """Run a fenced operation, retrying through Redis outages until the lease would
        have expired anyway (the scripts recognise their own replays, so retrying a
        call whose reply was lost is safe). Its result, or None when it could not be
        recorded: LeaseLost (logged, counted) or an outage that outlasted the lease. A
        script error is raised: running it again on the same data cannot help."""
        claim = attempt.claim
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.settings.lease_seconds
        delay = 0.05
        while True:
            try:
                result = await operation()
            except LeaseLost as exc:
                expired = exc.reason == LOST_EXPIRED
                self._lost(attempt, exc.reason, QueueState.EXPIRED if expired else "")
                return None
            except TRANSIENT as exc:
                if is_script_error(exc):
                    raise
                self.health.failed("recording a job's outcome", exc)
                if loop.time() > give_up:
                    log.error(
                        "gave up recording job=%s%s after %.0fs: %s; its lease lapses and the "
                        "reaper retries it",
                        claim.job_id, attempt.trace.log_text(), self.settings.lease_seconds,
                        describe(exc), extra=self._job_fields(attempt),
                    )  # fmt: skip
                    return None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            self.health.ok()
            return result

    def _job_fields(self, attempt: _Attempt) -> dict[str, Any]:
        """The `extra=` fields of a log line about one attempt (JSON logs show them)."""
        claim = attempt.claim
        return {
            "job_id": claim.job_id,
            "agent_type": self.agent_type,
            "attempt": claim.attempt,
            **attempt.trace.log_fields(),
        }

    def _lost(self, attempt: _Attempt, reason: str, state: str) -> None:
        """The attempt's lease was lost (`reason`): count and log it where the job is now.
        A job whose TTL passed and that was expired elsewhere (`state` "expired": another
        worker's cleanup, while this worker's loop was held up) ended as Redis counted
        it, expired: the expiry line then, as for an expiry of this worker's own."""
        if state == QueueState.EXPIRED:
            self.counts[QueueState.EXPIRED] += 1
            attempt.trace.outcome(QueueState.EXPIRED, error=EXPIRED_ELSEWHERE)
            claim = attempt.claim
            self.attempt_log.failed(
                job_id=claim.job_id,
                agent_type=self.agent_type,
                attempt=claim.attempt or None,
                max_attempts=claim.max_attempts or None,
                outcome=QueueState.EXPIRED,
                error=EXPIRED_ELSEWHERE,
                trace=attempt.trace.log_fields(),
            )
            return
        self.counts[AttemptOutcome.LOST] += 1
        attempt.trace.outcome(AttemptOutcome.LOST)
        log.warning(
            "lease lost job=%s%s: %s", attempt.claim.job_id, attempt.trace.log_text(), reason,
            extra=self._job_fields(attempt),
        )  # fmt: skip

    async def _lost_state(self, attempt: _Attempt) -> str:
        """Where the job of a lost lease is now (Leases.lost_state); "unknown" when
        Redis cannot say (an outage: the loss is then counted as lost)."""
        try:
            return await self._leases.lost_state(attempt.claim.job_id)
        except TRANSIENT as exc:
            self.health.failed("reading a job", exc)
            return "unknown"

    def _unrecorded(self, attempt: _Attempt, exc: CorruptQueueState, ending: str) -> None:
        """How an attempt ended could not be recorded: the script refused corrupt queue
        state, writing nothing. The lease is left to lapse (the keeper stops renewing),
        then the reaper retries the job: one ERROR line says so, with the job's trace
        ids in its text and its fields."""
        self.health.refused(
            "recording a job's outcome", exc,
            f"job={attempt.claim.job_id}{attempt.trace.log_text()} ({ending}) stays leased "
            "until its lease lapses, then the reaper retries it",
            extra=self._job_fields(attempt),
        )  # fmt: skip

    def _lease_lost(self, job_id: str, token: str) -> None:
        """From the lease keeper: renewal was refused for this attempt."""
        attempt = self._running.get(token)
        # Only the attempt renewed is lost: by now it may have ended and this worker may
        # hold the job's next attempt (same job id, another token).
        if attempt is None or attempt.settled or attempt.reason is not None:
            return
        # Counted and logged when the attempt is recorded (_record), once Redis said
        # where the job is now; the handler is cancelled at once.
        attempt.abort(_LOST)

    # -- chores --------------------------------------------------------------------
    async def _reap(self) -> None:
        report = await self._chores.reap()
        for job_id, outcome, trace_context in report.ended:
            self.attempt_log.failed(
                job_id=job_id,
                agent_type=self.agent_type,
                attempt=None,
                max_attempts=None,
                outcome=outcome,
                error=LEASE_EXPIRED,
                trace=self._tracing.creation_log_fields(trace_context, job_id, self.agent_type),
            )
        if report.requeued:
            log.info("reaper: %d job(s) taken but never claimed went back", report.requeued)

    async def _cleanup(self) -> None:
        now_ms = None
        if self._redis_offset is not None:
            now_ms = int((asyncio.get_running_loop().time() + self._redis_offset) * 1000)
        done = await self._chores.expire_due(now_ms=now_ms, on_expired=self._log_expired)
        if done.expired:
            log.info("cleanup expired %d job(s)", len(done.expired))

    def _log_expired(self, step: ExpireReport) -> None:
        """One line per job the cleanup expired, as for a job the claim expires, under
        the trace its producer started; rate-limited with the failed attempts' (a run may
        expire thousands; the run's count is never suppressed)."""
        for job_id, carried in zip(step.expired, step.traces, strict=False):
            self._log_expired_job(job_id, carried, TTL_EXPIRED)

    async def _heartbeat(self) -> None:
        redis_ms = await self._chores.heartbeat(self.worker_id, len(self._running))
        self._redis_offset = redis_ms / 1000 - asyncio.get_running_loop().time()
        self.attempt_log.flush()

    async def _beat(self, keeper: LeaseKeeper) -> None:
        """Tell the keeper the loop is alive, every tick (its loop-stall monitor)."""
        while True:
            keeper.beat()
            await asyncio.sleep(keeper.tick)

    def _chore(
        self,
        interval: float,
        step: Callable[[], Awaitable[Any]],
        activity: str,
        always_writes: bool = False,
    ) -> asyncio.Task[None]:
        return asyncio.create_task(self._every(interval, step, activity, always_writes))

    async def _every(
        self,
        interval: float,
        step: Callable[[], Awaitable[Any]],
        activity: str,
        always_writes: bool,
    ) -> None:
        # A chore with nothing to do only reads, which Redis allows at maxmemory: only one
        # that always writes (the heartbeat) may say Redis accepts writes again.
        while not self._stopping.is_set():
            try:
                await step()
                self.health.ok(wrote=always_writes)
            except CorruptQueueState as exc:
                # A queue key holds another type or a counter does not parse (the script
                # wrote nothing). Reported, and retried: an operator may repair the key.
                self.health.refused(activity, exc, f"retrying every {interval:g}s")
            except TRANSIENT as exc:
                self.health.failed(activity, exc)
            await self._wait_any(asyncio.sleep(interval))

    async def _wait_any(self, awaitable: Awaitable[Any]) -> None:
        """Wait for `awaitable` or for stop(), whichever comes first."""
        waiter = asyncio.ensure_future(awaitable)
        stopper = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, stopper):
                task.cancel()

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
            attempt.abort(_SHUTDOWN)
        late = [task for task in tasks if not task.done()]
        if late:
            await asyncio.wait(late)
