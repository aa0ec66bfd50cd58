"""Lease renewal on a thread of its own: a handler that blocks the event loop cannot starve it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from ..errors import CorruptQueueState
from ..queue.backend_errors import TRANSIENT, RedisHealth
from ..queue.connection import QueueConnection
from ..queue.queue_settings import QueueSettings
from .attempt_calls import AttemptCalls

__all__ = ["LeaseKeeper"]

MIN_STALL_SECONDS = 0.2
"""Loop stalls shorter than this are never reported (a busy loop is not a blocked one)."""


class LeaseKeeper:
    """Renews the leases a worker holds every lease/3 from its own thread, event loop and
    Redis connection, and watches the worker's event loop: a stall longer than a third
    of the lease is logged as a WARNING naming the task that holds the loop (a
    handler's task is named after its job).

    Renewal refused for an attempt is reported to the worker's loop through `on_lost`
    (job_id, token); it runs when that loop is free again."""

    def __init__(
        self,
        settings: QueueSettings,
        agent_type: str,
        *,
        loop: asyncio.AbstractEventLoop,
        on_lost: Callable[[str, str], None],
        health: RedisHealth,
        logger: logging.Logger,
    ) -> None:
        # Renewal is one script call per lease/3: a connection or two is plenty.
        self._settings = settings.with_overrides(pool_min=0, pool_max=2)
        self._agent_type = agent_type
        self._main_loop = loop
        self._on_lost = on_lost
        self._health = health
        self._log = logger
        self.interval = settings.lease_seconds / 3
        self.stall_after = max(settings.lease_seconds / 3, MIN_STALL_SECONDS)
        self.tick = self.stall_after / 4
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}  # token -> job id
        self._beat = time.monotonic()
        self._stall: tuple[float, str] | None = None  # since when, blamed on what
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self.renewals = 0
        """Renewal calls that succeeded (for tests and the curious)."""
        self.stalls = 0
        """Loop stalls reported."""

    # -- called from the worker's loop ---------------------------------------------------
    def hold(self, job_id: str, token: str) -> None:
        with self._lock:
            self._held[token] = job_id

    def drop(self, token: str) -> None:
        with self._lock:
            self._held.pop(token, None)

    def beat(self) -> None:
        """The worker's loop is alive (its ticker calls this every `tick`)."""
        self._beat = time.monotonic()

    def start(self) -> None:
        self._beat = time.monotonic()
        self._thread = threading.Thread(
            target=self._main, name=f"lease-keeper-{self._agent_type}", daemon=True
        )
        self._thread.start()
        self._started.wait()

    def stop(self) -> None:
        """Stop renewing and wait for the thread (blocking: call it via to_thread)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join()

    # -- the keeper's thread ---------------------------------------------------------------
    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException:  # a dying keeper must say so: leases would quietly lapse
            self._log.exception("lease keeper stopped by an unexpected error")
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._started.set()
        connection = QueueConnection(self._settings)
        leases = AttemptCalls(connection, self._agent_type)
        watcher = asyncio.create_task(self._watch(stop))
        try:
            while not stop.is_set():
                await self._renew(leases)
                await _wait(stop, self.interval)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await connection.aclose()

    async def _renew(self, leases: AttemptCalls) -> None:
        with self._lock:
            held = [(job_id, token) for token, job_id in self._held.items()]
        if not held:
            return
        try:
            lost = set(await leases.renew(held))
        except CorruptQueueState as exc:
            self._health.refused(
                "renewing leases", exc, "the leases lapse and the reaper retries their jobs"
            )
            return
        except TRANSIENT as exc:
            self._health.failed("renewing leases", exc)
            return
        # Every lease lost: the script only read, which Redis allows at maxmemory, so this
        # says nothing of writes. (A held attempt that already ended counts as renewed:
        # its own end was a write of this worker's moments ago.)
        self._health.ok(wrote=any(job_id not in lost for job_id, _ in held))
        self.renewals += 1
        for job_id, token in held:
            if job_id in lost:
                self._tell_lost(job_id, token)

    def _tell_lost(self, job_id: str, token: str) -> None:
        with contextlib.suppress(RuntimeError):  # the worker's loop ended: nothing to cancel
            self._main_loop.call_soon_threadsafe(self._on_lost, job_id, token)

    async def _watch(self, stop: asyncio.Event) -> None:
        checked = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            self.observe(now, paused=now - checked > self.stall_after)
            checked = now
            await _wait(stop, self.tick)

    def observe(self, now: float, *, paused: bool = False) -> None:
        """One look at the worker's loop at `now` (monotonic). `paused`: this thread did
        not run either for longer than a stall: the whole process was paused (SIGSTOP)
        or starved of CPU, not the loop's fault, so the loop's lag counts from now on.
        Unless a stall is already reported: it goes on (restarting its count would end
        it here and report the rest as a second stall of the same job)."""
        if paused and self._stall is None:
            self._beat = now
        self._check_loop(now)

    def _check_loop(self, now: float) -> None:
        lag = now - self._beat
        if self._stall is None and lag > self.stall_after:
            blamed = self._blame()
            self._stall = (self._beat, blamed)
            self.stalls += 1
            self._log.warning(
                "event loop blocked for %.1fs by %s: nothing else of this worker runs "
                "meanwhile (leases are still renewed); a handler that blocks should be a "
                "plain def, which runs in a thread",
                lag, blamed, extra={"blocked_by": blamed, "blocked_seconds": round(lag, 3)},
            )  # fmt: skip
        elif self._stall is not None and lag <= self.stall_after:
            since, blamed = self._stall
            self._stall = None
            self._log.info(
                "event loop free again after %.1fs (blocked by %s)", self._beat - since, blamed
            )

    def _blame(self) -> str:
        # Read from this thread: the loop's current task is a plain dict lookup, and the
        # loop is stuck inside that very task, so it cannot change under us.
        try:
            task = asyncio.current_task(self._main_loop)
        except RuntimeError:
            task = None
        return task.get_name() if task is not None else "a callback outside any task"


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
