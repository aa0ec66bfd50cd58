"""One attempt, from its handler's start to its recorded outcome: a state machine read
top to bottom in `Settlement.run`.

    run the handler ─┬─ returned ──────────── complete (fenced by the lease token)
                     ├─ raised ────────────── fail: retry with backoff, dead letter, or
                     │                        failed for good (NonRetryableError, corrupt)
                     ├─ lease lost ────────── counted lost (or expired, if it was)
                     ├─ TTL passed ────────── expire (by Redis TIME)
                     └─ worker stopping ───── release: back to the queue, uncounted

Every write is one fenced script call (worker.attempt_calls), retried through Redis
outages until the lease would have lapsed anyway; a refused one (corrupt queue state)
leaves the lease to lapse, so the reaper retries the job."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptQueueState, LeaseLost
from ..queue.backend_errors import TRANSIENT, RedisHealth, is_script_error
from ..queue.connection import QueueConnection
from ..queue.context import Handler, JobContext, NonRetryableError, set_current_job
from ..queue.log_text import bounded, describe, format_traceback
from ..queue.payload import JobPayload
from ..queue.queue_settings import QueueSettings
from ..queue.results import ResultTooLarge
from ..queue.tracing import NO_TRACE, JobTrace, QueueTracing, Settle
from ..status import AttemptOutcome, QueueState
from .attempt_calls import LOST_EXPIRED, MAX_ERROR_LENGTH, AttemptCalls, Claim
from .attempt_log import AttemptLog, log
from .handler_calls import HandlerThreads, Outcome, Raised, Returned, start_handler
from .lease_keeper import LeaseKeeper
from .progress_reporter import ProgressReporter

__all__ = ["LOST", "SHUTDOWN", "TTL", "Attempt", "CorruptJob", "Settlement", "wait_or_stop", "wake"]

# Why the worker itself ended an attempt (None: the handler ended it).
LOST = "lost"  # renewal was refused: the job belongs to someone else now
SHUTDOWN = "shutdown"  # the worker is stopping: the attempt goes back uncounted
TTL = "ttl"  # the job's TTL passed (by Redis's clock) before the handler finished
CANCEL = "cancel"  # the job was cancelled (JobQueue.cancel): its attempt ends cancelled

TTL_PASSED = "TTL passed: the job did not finish within its ttl_seconds"
EXPIRED_ELSEWHERE = f"{TTL_PASSED} (expired by a cleanup while it ran)"


class CorruptJob(Exception):
    """The stored job cannot be run (its payload or a field does not parse)."""


@dataclass(eq=False, slots=True)
class Attempt:
    """One attempt this worker runs: its claim, its handler call and how it ended."""

    claim: Claim
    deadline: float
    """The job's TTL on the loop's (monotonic) clock, from the claim's Redis TIME."""
    reason: str | None = None
    ended: bool = False
    """The handler call really returned."""
    end_waiter: asyncio.Future[None] | None = None
    """Done when it does, for a worker that waits for that (see Settlement._linger)."""
    handler: asyncio.Future[Outcome] | None = None
    waiter: asyncio.Future[None] | None = None
    """Done when the handler returned, the attempt was aborted or its TTL passed."""
    holds_slot: bool = False
    """One of the worker's `concurrency` slots is this attempt's until its handler
    returned (or, when none was started, until the attempt ended)."""
    settled: bool = False
    task: asyncio.Task[None] | None = None
    trace: JobTrace = NO_TRACE
    """Its process span and the trace ids its log lines carry (see queue.tracing)."""
    context: JobContext | None = None
    """What its handler reads with current_job() (set when the handler starts)."""
    cancel_reason: str | None = None
    """The reason of a cancel request that reached this attempt (CANCEL)."""

    def cancel(self, reason: str) -> None:
        """The job was cancelled: a sync handler sees current_job().cancel_requested, an
        async one's task is cancelled, and the attempt ends cancelled (queue/cancel.py)."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.context is not None:
            self.context.cancel_requested.set()
        self.abort(CANCEL)

    def abort(self, reason: str) -> None:
        """End the attempt for `reason` (the first reason given stands)."""
        if self.reason is None:
            self.reason = reason
        wake(self.waiter)
        if self.handler is not None:
            self.handler.cancel()  # a coroutine is cancelled; a thread runs on regardless


def wake(waiter: asyncio.Future[None] | None, *_: object) -> None:
    """Resolve `waiter` unless it is already done (any of several events may come first)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


async def wait_or_stop(stopping: asyncio.Event, awaitable: Awaitable[Any]) -> None:
    """Wait for `awaitable` or for `stopping`, whichever comes first."""
    waiter = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, stopper):
            task.cancel()


_RESULT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""How a handler's return value is stored (one encoder: json.dumps with options builds a
new one per call)."""


@dataclass(kw_only=True, eq=False)
class Settlement:
    """Runs and settles the attempts of one worker (see the module's docstring)."""

    settings: QueueSettings
    agent_type: str
    handler: Handler
    handler_is_async: bool
    worker_id: str
    connection: QueueConnection
    calls: AttemptCalls
    keeper: LeaseKeeper
    threads: HandlerThreads | None
    tracing: QueueTracing
    counts: dict[str, int]
    """How attempts ended, as Redis recorded them (the worker's counts)."""
    attempt_log: AttemptLog
    health: RedisHealth
    stopping: asyncio.Event
    on_handler_end: Callable[[Attempt], None]

    async def run(self, attempt: Attempt) -> None:
        claim = attempt.claim
        try:
            # In the try: whatever fails here is logged and frees the slot and the lease,
            # rather than leaving the job leased until its TTL with no line at all.
            job_trace = attempt.trace = self.tracing.process(
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
            attempt.abort(SHUTDOWN)
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

    def _drop_lease(self, claim: Claim) -> None:
        if self.keeper is not None:
            self.keeper.drop(claim.token)

    async def _outcome(self, attempt: Attempt) -> Outcome | None:
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
        reporter = ProgressReporter(self.connection, self.calls.keys, claim.job_id, claim.token)
        context = JobContext(
            claim.job_id, self.agent_type, claim.attempt, claim.max_attempts,
            claim.expires_at_ms / 1000, self.worker_id, attempt.deadline,
            progress_reporter=reporter,
        )  # fmt: skip
        attempt.context = context
        if attempt.reason is not None:
            # aborted before it started (its lease was lost, or it was cancelled, meanwhile)
            return None
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
            threads=self.threads,
            # What the loop monitor names when this call blocks the event loop.
            name=f"job={claim.job_id} attempt={claim.attempt}/{claim.max_attempts}",
            on_end=lambda: self.on_handler_end(attempt),
        )
        timer = loop.call_at(attempt.deadline, wake, waiter)
        try:
            await waiter
        except BaseException:
            reporter.close()  # (run() is cancelled: no held report is sent after it)
            raise
        finally:
            timer.cancel()
        if attempt.reason is None and handler.done() and not handler.cancelled():
            await reporter.flush()  # the report held in its window, stored before the outcome
            return handler.result()
        reporter.close()
        # Cancelled by someone else than us: asyncio.run ending, i.e. the worker stopping.
        attempt.abort(SHUTDOWN if handler.cancelled() else TTL)
        return None

    async def _record(self, attempt: Attempt, outcome: Outcome | None) -> None:
        """Record how the attempt ended, fenced by its lease, and count and log it."""
        reason = attempt.reason
        if reason == LOST:
            # Renewal was refused (the handler is cancelled): say where the job is, so a
            # job another worker's cleanup expired is counted and logged as expired.
            state = await self._lost_state(attempt)
            self._lost(attempt, f"renewal refused (job is {state}); handler cancelled", state)
            return
        ended_by_worker = {SHUTDOWN: self._release, TTL: self._expire, CANCEL: self._cancel}
        if reason in ended_by_worker:
            await ended_by_worker[reason](attempt)
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

    async def _complete(self, attempt: Attempt, outcome: Returned) -> None:
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
            done = await self.calls.complete(claim.job_id, claim.token, result_json)
            # cancel: asked for while it ran (before this worker heard): not stored
            if done == AttemptOutcome.CANCELLED:
                return QueueState.CANCELLED
            return QueueState.SUCCEEDED

        try:
            recorded = await self._settle_traced(attempt, "complete", complete)
        except TRANSIENT as exc:  # only a script error gets here (_settle retries the rest)
            # The complete script could not read the job's record: a stored field is
            # corrupt. Retrying cannot help; record that instead of letting the lease lapse.
            error = f"recording the result failed on the stored job: {describe(exc)}"
            await self._fail(attempt, exc, "corrupt", error=error)
            return
        if recorded == QueueState.CANCELLED:
            self._cancelled(attempt)
        elif recorded is not None:
            self.counts[QueueState.SUCCEEDED] += 1

    async def _fail(
        self, attempt: Attempt, exc: BaseException, mode: str, *, error: str | None = None
    ) -> None:
        claim = attempt.claim
        error = bounded(error or describe(exc), MAX_ERROR_LENGTH)
        trace = format_traceback(exc)
        # The failures-by-class breakdown counts the handler's exception class; a corrupt
        # stored job is counted as such (error_class derives it), not as a script error.
        error_class = None if mode == "corrupt" else type(exc).__name__

        async def fail() -> str:
            return await self.calls.fail(
                claim.job_id,
                claim.token,
                error,
                mode=mode,
                traceback=trace,
                error_class=error_class,
            )

        try:
            outcome = await self._settle_traced(attempt, "fail", fail)
        except CorruptQueueState as refusal:
            self._unrecorded(attempt, refusal, f"its attempt failed with {error}")
            return
        if outcome == AttemptOutcome.CANCELLED:
            self._cancelled(attempt)  # cancel: asked for while it ran; no failure recorded
            return
        if outcome is not None:
            self._count(outcome)
        self._log_failed(attempt, str(outcome) if outcome is not None else "unrecorded", error, exc)

    async def _release(self, attempt: Attempt) -> None:
        """Give the attempt back uncounted (the worker stops before the job finished)."""
        claim = attempt.claim

        async def release() -> str:
            error = "worker shut down before the job finished"
            return await self.calls.fail(claim.job_id, claim.token, error, mode="release")

        try:
            outcome = await self._settle_traced(attempt, "release", release)
        except CorruptQueueState as exc:
            self._unrecorded(attempt, exc, "the worker stops before it finished")
            return
        if outcome is not None:
            self._count(outcome)
            log.info(
                "released job=%s%s: the worker stops before it finished",
                claim.job_id, attempt.trace.log_text(), extra=self._job_fields(attempt),
            )  # fmt: skip

    # ---- cancel (queue/cancel.py) ------------------------------------------------------
    async def _cancel(self, attempt: Attempt) -> None:
        """End a cancelled attempt: the fail script ends a job whose record holds a cancel
        request cancelled, whatever the mode; "release" is what it does otherwise (the
        request gone meanwhile: the job is given back, uncounted)."""
        claim = attempt.claim

        async def cancel() -> str:
            return await self.calls.fail(
                claim.job_id, claim.token, "cancelled while running", mode="release"
            )

        try:
            outcome = await self._settle_traced(attempt, "cancel", cancel)
        except CorruptQueueState as exc:
            self._unrecorded(attempt, exc, "it was cancelled")
            return
        if outcome == AttemptOutcome.CANCELLED:
            self._cancelled(attempt)
        elif outcome is not None:
            self._count(outcome)

    def _cancelled(self, attempt: Attempt) -> None:
        """Count, trace and log (once, INFO) a job this attempt ended cancelled."""
        self.counts[QueueState.CANCELLED] += 1
        reason = attempt.cancel_reason
        attempt.trace.cancelled(reason)
        log.info(
            "cancelled job=%s agent_type=%s attempt=%d/%d%s: %s",
            attempt.claim.job_id, self.agent_type, attempt.claim.attempt,
            attempt.claim.max_attempts, attempt.trace.log_text(),
            f"reason {reason!r}" if reason else "asked for while it ran; its result is not stored",
            extra=self._job_fields(attempt),
        )  # fmt: skip

    async def _expire(self, attempt: Attempt) -> None:
        """Expire the job at its TTL (the handler was cancelled, or its thread left to
        finish on its own). The script decides by Redis TIME, like the deadline did."""
        with attempt.trace.settle("expire") as settle:
            await self._expire_job(attempt, settle)

    async def _expire_job(self, attempt: Attempt, settle: Settle) -> None:
        claim = attempt.claim
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.settings.lease_seconds
        while True:
            try:
                expired = await self._settle(attempt, lambda: self.calls.expire([claim.job_id]))
            except CorruptQueueState as exc:
                self._unrecorded(attempt, exc, "its TTL passed")
                return
            if expired is None:
                return
            if expired:
                settle.outcome(QueueState.EXPIRED)
                self._expired(attempt, TTL_PASSED)
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
            state, token = await self.connection.client.hmget(
                self.calls.keys.job(claim.job_id), ["state", "token"]
            )  # type: ignore[misc]
        except TRANSIENT as exc:
            self.health.failed("reading a job", exc)
            return True
        return bool(state == QueueState.RUNNING and token == claim.token)

    async def _linger(self, attempt: Attempt) -> None:
        """Keep the attempt running (shutdown waits for it; its slot stays taken) while its
        handler still runs after the attempt ended (a thread cannot be cancelled; a
        coroutine may ignore it), unless stopping."""
        if attempt.handler is None or attempt.ended or attempt.reason == SHUTDOWN:
            return  # (no handler: the stored job did not parse, nothing was started)
        log.debug(
            "job=%s%s: waiting for its handler to return",
            attempt.claim.job_id, attempt.trace.log_text(), extra=self._job_fields(attempt),
        )  # fmt: skip
        attempt.end_waiter = asyncio.get_running_loop().create_future()
        await wait_or_stop(self.stopping, attempt.end_waiter)

    def _count(self, outcome: str) -> None:
        # fail() reports where the job went (retrying, dead, failed, released), or for a
        # replay the state the first call left it in.
        if outcome in self.counts:
            self.counts[outcome] += 1

    async def _settle_traced(
        self, attempt: Attempt, name: str, operation: Callable[[], Awaitable[Any]]
    ) -> Any | None:
        """_settle under the attempt's `name` settle span, which records the outcome."""
        with attempt.trace.settle(name) as settle:
            outcome = await self._settle(attempt, operation)
            if outcome is not None:
                settle.outcome(outcome)
        return outcome

    async def _settle(
        self, attempt: Attempt, operation: Callable[[], Awaitable[Any]]
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

    def _expired(self, attempt: Attempt, error: str) -> None:
        """Count, trace and log the attempt's job as expired (`error` says by whom)."""
        self.counts[QueueState.EXPIRED] += 1
        attempt.trace.outcome(QueueState.EXPIRED, error=error)
        self._log_failed(attempt, QueueState.EXPIRED, error)

    def _log_failed(
        self, attempt: Attempt, outcome: str, error: str, exc: BaseException | None = None
    ) -> None:
        """One failed-attempt line (rate-limited: AttemptLog.failed)."""
        claim = attempt.claim
        self.attempt_log.failed(
            job_id=claim.job_id,
            agent_type=self.agent_type,
            attempt=claim.attempt or None,  # (0: a claim whose fields did not parse)
            max_attempts=claim.max_attempts or None,
            outcome=outcome,
            error=error,
            exc=exc,
            trace=attempt.trace.log_fields(),
        )

    def _job_fields(self, attempt: Attempt) -> dict[str, Any]:
        """The `extra=` fields of a log line about one attempt (JSON logs show them)."""
        claim = attempt.claim
        return {
            "job_id": claim.job_id,
            "agent_type": self.agent_type,
            "attempt": claim.attempt,
            **attempt.trace.log_fields(),
        }

    def _lost(self, attempt: Attempt, reason: str, state: str) -> None:
        """The attempt's lease was lost (`reason`): count and log it where the job is now.
        A job whose TTL passed and that was expired elsewhere (`state` "expired": another
        worker's cleanup, while this worker's loop was held up) ended as Redis counted
        it, expired: the expiry line then, as for an expiry of this worker's own."""
        if state == QueueState.EXPIRED:
            self._expired(attempt, EXPIRED_ELSEWHERE)
            return
        self.counts[AttemptOutcome.LOST] += 1
        attempt.trace.outcome(AttemptOutcome.LOST)
        log.warning(
            "lease lost job=%s%s: %s", attempt.claim.job_id, attempt.trace.log_text(), reason,
            extra=self._job_fields(attempt),
        )  # fmt: skip

    async def _lost_state(self, attempt: Attempt) -> str:
        """Where the job of a lost lease is now (AttemptCalls.lost_state); "unknown" when
        Redis cannot say (an outage: the loss is then counted as lost)."""
        try:
            return await self.calls.lost_state(attempt.claim.job_id)
        except TRANSIENT as exc:
            self.health.failed("reading a job", exc)
            return "unknown"

    def _unrecorded(self, attempt: Attempt, exc: CorruptQueueState, ending: str) -> None:
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
