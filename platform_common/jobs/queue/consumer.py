"""Worker: runs one agent type's jobs through an async handler, N at a time, reliably.

Reliable fetch (BLMOVE into processing, a claim script with a lease), lease renewal,
fenced completion, and the chores (reaper, promoter, cleanup, heartbeat) all run in
this one asyncio process. SIGTERM (via `stop()`) stops fetching, lets running jobs
finish for `shutdown_timeout`, then gives the rest back to the queue."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from ..clock import now
from ..errors import ConfigurationError, LeaseLost
from ..status import AttemptOutcome, QueueState
from ..validation import is_int
from .connection import QueueConnection
from .context import Handler, JobContext, NonRetryableError, set_current_job
from .leases import Claim, Leases
from .maintenance import Maintenance
from .payload import JobPayload
from .queue_settings import QueueSettings

__all__ = ["Worker"]

log = logging.getLogger("platform_common.jobs.queue.consumer")
_TRANSIENT = (RedisError, OSError)


class Worker:
    """Runs `handler` for the jobs of `agent_type`, at most `concurrency` at once."""

    def __init__(
        self,
        settings: QueueSettings,
        agent_type: str,
        handler: Handler,
        *,
        concurrency: int = 10,
        worker_id: str | None = None,
    ) -> None:
        if agent_type not in settings.agent_types:
            raise ConfigurationError("agent_type", f"{agent_type!r} is not in agent_types")
        if not is_int(concurrency) or concurrency < 1:
            raise ConfigurationError("concurrency", f"must be an int >= 1, got {concurrency!r}")
        self.settings = settings
        self.agent_type = agent_type
        self.handler = handler
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.ready = asyncio.Event()
        """Set once connected, pre-warmed and registered (a heartbeat was written)."""
        # How attempts ended. str() keys, not members: the stop log prints plain names.
        counted = (
            QueueState.SUCCEEDED, AttemptOutcome.RETRYING, AttemptOutcome.DEAD,
            AttemptOutcome.FAILED, QueueState.EXPIRED, AttemptOutcome.RELEASED,
            AttemptOutcome.LOST,
        )  # fmt: skip
        self.counts: dict[str, int] = dict.fromkeys(map(str, counted), 0)
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._running: dict[str, tuple[Claim, asyncio.Task[None]]] = {}
        self._lost: set[str] = set()
        self._releasing = False
        self._expect_more = True
        self._token_prefix = os.urandom(4).hex()
        self._token_counter = itertools.count()

    def stop(self) -> None:
        """Ask the worker to stop gracefully (safe from a signal handler)."""
        self._stopping.set()

    async def run(self) -> None:
        """Connect, work until `stop()`, then shut down gracefully and disconnect."""
        connection = await QueueConnection.open(self.settings)
        blocking = connection.blocking_client()
        self._connection = connection
        self._blocking = blocking
        self._leases = Leases(connection, self.agent_type)
        self._chores = Maintenance(connection, self.agent_type)
        self._keys = self._leases.keys
        chores: list[asyncio.Task[None]] = []
        try:
            await connection.register_type(self.agent_type)
            await self._chores.heartbeat(self.worker_id)
            self.ready.set()
            log.info("worker ready id=%s agent_type=%s", self.worker_id, self.agent_type)
            settings = self.settings
            chores = [
                asyncio.create_task(self._every(settings.lease_seconds / 3, self._renew)),
                asyncio.create_task(self._every(settings.reaper_interval, self._reap)),
                asyncio.create_task(self._every(settings.promote_interval, self._chores.promote)),
                asyncio.create_task(self._every(settings.cleanup_interval, self._cleanup)),
                asyncio.create_task(self._every(settings.heartbeat_interval, self._heartbeat)),
            ]
            await self._fetch_loop()
            await self._drain()
        finally:
            for task in chores:
                task.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            with contextlib.suppress(*_TRANSIENT):
                await self._chores.heartbeat(self.worker_id, leaving=True)
            await blocking.aclose()
            await connection.aclose()
            log.info("worker stopped id=%s counts=%s", self.worker_id, self.counts)

    # -- fetching ------------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        delay = 0.05
        while not self._stopping.is_set():
            free = self.concurrency - len(self._running)
            if free <= 0:
                self._slot_freed.clear()
                await self._wait_any(self._slot_freed.wait())
                continue
            try:
                taken = await self._take(min(free, self.settings.fetch_batch))
                if taken:
                    remaining, claims = await self._leases.claim(
                        self.worker_id, [(job_id, self._new_token()) for job_id in taken]
                    )
                    self._expect_more = remaining > 0
                    for claim in claims:
                        self._start(claim)
                delay = 0.05
            except _TRANSIENT as exc:
                # Redis restarted or the connection was killed: back off and go on; a job
                # taken but not claimed is found by the reaper (provisional lease).
                log.warning("fetch failed, retrying in %.2fs: %r", delay, exc)
                await self._wait_any(asyncio.sleep(delay))
                delay = min(delay * 2, 2.0)

    async def _take(self, want: int) -> list[str]:
        """Move up to `want` job ids into processing: without blocking while the queue
        has jobs (one pipelined round trip), else one BLMOVE on our own connection."""
        keys = self._keys
        if self._expect_more:
            move = ("LMOVE", keys.queue, keys.processing, "RIGHT", "LEFT")
            replies = await self._connection.execute_many([move] * want)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            taken = [job_id for job_id in replies if job_id is not None]
            if taken:
                return taken
            self._expect_more = False
        # Redis takes a fractional block timeout; redis-py's stub says int.
        timeout: Any = self.settings.block_timeout
        job_id = await self._blocking.blmove(keys.queue, keys.processing, timeout, "RIGHT", "LEFT")
        return [job_id] if job_id is not None else []

    def _new_token(self) -> str:
        return f"{self._token_prefix}{next(self._token_counter):x}"

    def _start(self, claim: Claim) -> None:
        task = asyncio.create_task(self._run_job(claim))
        self._running[claim.job_id] = (claim, task)

    # -- running one job -----------------------------------------------------------
    async def _run_job(self, claim: Claim) -> None:
        try:
            label, settle = await self._attempt(claim)
            await self._settle(claim, label, settle)
        except asyncio.CancelledError:
            if claim.job_id not in self._lost:
                # Shutdown ran out of time: give the attempt back, uncounted.
                error = "worker shut down before the job finished"
                release = partial(
                    self._leases.fail, claim.job_id, claim.token, error, mode="release"
                )
                await self._settle(claim, AttemptOutcome.RELEASED, release)
            # else: our lease was lost, the job belongs to someone else now.
        finally:
            self._running.pop(claim.job_id, None)
            self._lost.discard(claim.job_id)
            self._slot_freed.set()

    async def _attempt(self, claim: Claim) -> tuple[str, Callable[[], Awaitable[Any]]]:
        """Run the handler under the job's TTL; returns what happened and the fenced
        operation that records it."""
        leases = self._leases
        job_id, token = claim.job_id, claim.token
        payload = JobPayload.from_json(claim.payload)
        expires_at = claim.expires_at_ms / 1000
        context = JobContext(
            job_id, self.agent_type, claim.attempt, claim.max_attempts, expires_at, self.worker_id
        )
        set_current_job(context)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(loop.time() + (expires_at - now())) as ttl:
                result = await self.handler(payload)
        except TimeoutError as exc:
            if ttl.expired():
                return QueueState.EXPIRED, partial(leases.expire, [job_id])
            return "error", partial(leases.fail, job_id, token, _describe(exc))
        except NonRetryableError as exc:
            return AttemptOutcome.FAILED, partial(
                leases.fail, job_id, token, _describe(exc), mode="fatal"
            )
        except Exception as exc:
            return "error", partial(leases.fail, job_id, token, _describe(exc))
        try:
            result_json = json.dumps(result, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            error = f"result is not JSON-serialisable: {exc}"
            return AttemptOutcome.FAILED, partial(leases.fail, job_id, token, error, mode="fatal")
        return QueueState.SUCCEEDED, partial(leases.complete, job_id, token, result_json)

    async def _settle(
        self, claim: Claim, label: str, operation: Callable[[], Awaitable[Any]]
    ) -> None:
        """Run a fenced operation, retrying through Redis outages until the lease would
        have expired anyway (the scripts recognise their own replays, so retrying a
        call whose reply was lost is safe). LeaseLost is logged, never raised."""
        give_up = now() + self.settings.lease_seconds
        delay = 0.05
        while True:
            try:
                outcome = await operation()
                break
            except LeaseLost as exc:
                self.counts[AttemptOutcome.LOST] += 1
                log.warning("lease lost job=%s: %s", claim.job_id, exc.reason)
                return
            except _TRANSIENT as exc:
                if now() > give_up:
                    log.error("gave up recording job=%s (%s): %r", claim.job_id, label, exc)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        # fail() reports where the job went (retrying, dead, failed, released).
        key = outcome if isinstance(outcome, str) and outcome in self.counts else label
        if key in self.counts:
            self.counts[key] += 1

    # -- chores --------------------------------------------------------------------
    async def _renew(self) -> None:
        held = {job_id: claim.token for job_id, (claim, _) in self._running.items()}
        for job_id in await self._leases.renew(list(held.items())):
            entry = self._running.get(job_id)
            # Only the attempt we renewed is lost: while the call was in flight that
            # attempt may have ended and this worker may hold the job's next attempt
            # (same job id, new token), which the answer says nothing about.
            if entry is not None and entry[0].token == held[job_id] and job_id not in self._lost:
                self._lost.add(job_id)
                self.counts[AttemptOutcome.LOST] += 1
                log.warning("lease lost job=%s: renewal refused; cancelling the handler", job_id)
                entry[1].cancel()

    async def _reap(self) -> None:
        report = await self._chores.reap()
        if report.retried or report.dead or report.requeued:
            log.info("reaper: %s", report)

    async def _cleanup(self) -> None:
        expired = await self._chores.cleanup()
        if expired:
            log.info("cleanup expired %d job(s)", len(expired))

    async def _heartbeat(self) -> None:
        await self._chores.heartbeat(self.worker_id)

    async def _every(self, interval: float, step: Callable[[], Awaitable[Any]]) -> None:
        while not self._stopping.is_set():
            try:
                await step()
            except _TRANSIENT as exc:
                log.warning("%s failed: %r", getattr(step, "__name__", step), exc)
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
        """Let running jobs finish for shutdown_timeout; give the rest back."""
        tasks = [task for _, task in self._running.values()]
        if not tasks:
            return
        log.info("stopping: waiting for %d running job(s)", len(tasks))
        _, late = await asyncio.wait(tasks, timeout=self.settings.shutdown_timeout)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
