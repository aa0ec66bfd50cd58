"""Redis failures in the queue's terms: typed errors at the API, one line per outage in a worker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from redis.exceptions import (
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import BackendBusy, BackendOutOfMemory, BackendUnavailable, CorruptQueueState
from ..redis.url import RedisSettings
from .log_text import RateLimit, describe

__all__ = [
    "CORRUPT_REPLY",
    "TRANSIENT",
    "RedisHealth",
    "backend_errors",
    "corrupt_reply",
    "is_out_of_memory",
    "is_outage",
    "is_script_error",
    "out_of_memory",
    "unreachable",
]

CORRUPT_REPLY = "CORRUPT "
"""How a queue script refuses corrupt state before its first write: the error reply
`CORRUPT <n> <problem>`, n the 1-based position in KEYS of the key at fault."""

TRANSIENT: tuple[type[BaseException], ...] = (
    RedisError, OSError, RedisClusterException, UnicodeDecodeError,
)  # fmt: skip
"""What a worker loop survives and retries: Redis said no or could not be reached
(RedisClusterException, raised when no cluster node answers, is not a RedisError), or
replied with a stored value that is not UTF-8, which the client cannot decode."""

# Redis cannot be reached, or cannot serve right now (cluster down, failover underway).
_OUTAGE: tuple[type[BaseException], ...] = (
    RedisConnectionError, RedisTimeoutError, OSError, RedisClusterException, ClusterError,
    ReadOnlyError,
)  # fmt: skip


def is_outage(exc: BaseException) -> bool:
    """Redis is unreachable or unable to serve (not a refusal of one command)."""
    if isinstance(exc, (BackendBusy, BackendOutOfMemory)):
        return False  # the pool is full, or memory: Redis itself answers
    return isinstance(exc, (*_OUTAGE, BackendUnavailable))


def is_out_of_memory(exc: BaseException) -> bool:
    """Redis refused a write at maxmemory (noeviction): it passes once memory is freed,
    so a worker waits it out like an outage. Also raised inside a script, where the
    reply names `user_script` too: that is no script error."""
    return isinstance(exc, (OutOfMemoryError, BackendOutOfMemory))


def is_script_error(exc: BaseException) -> bool:
    """A Lua script failed while running (e.g. on a stored value it cannot read):
    running it again on the same data fails again, so it is no outage to wait out."""
    if isinstance(exc, CorruptQueueState):
        return True  # refused by a script's own check, before it wrote anything
    return (
        isinstance(exc, ResponseError) and not is_out_of_memory(exc) and "user_script" in str(exc)
    )


def corrupt_reply(text: str, keys: Sequence[str]) -> CorruptQueueState:
    """The error a script's `CORRUPT <n> <problem>` reply stands for; n 0 names a key in
    no KEYS (a job key a take reads, a fairness key's list): `CORRUPT 0 <key> <problem>`,
    the problem starting "holds a" (a fairness key may hold spaces)."""
    position, _, problem = text[len(CORRUPT_REPLY) :].partition(" ")
    if position == "0":
        key, holds, rest = problem.partition(" holds a ")
        if not holds:
            key, _, rest = problem.partition(" ")
        return CorruptQueueState(key, holds.strip() + " " + rest if holds else rest)
    index = int(position) - 1 if position.isdigit() else -1
    key = keys[index] if 0 <= index < len(keys) else ""
    return CorruptQueueState(key, problem)


def out_of_memory(settings: RedisSettings, exc: BaseException) -> BackendOutOfMemory:
    """Redis refused a write at maxmemory (an `OOM` error reply)."""
    return BackendOutOfMemory(
        f"Redis at {settings.redacted_url()} is at maxmemory and refuses writes "
        f"(maxmemory-policy noeviction): {exc}"
    )


def unreachable(settings: RedisSettings, exc: BaseException) -> BackendUnavailable:
    """The BackendUnavailable the JobStore raises too: the redacted URL and the cause."""
    return BackendUnavailable(
        f"Redis at {settings.redacted_url()} unreachable: {type(exc).__name__}: {exc}"
    )


class backend_errors:  # lower case: used like a function, `with backend_errors(...)`
    """Raise the package's BackendUnavailable for an unreachable Redis, as the JobStore
    does (BackendBusy, a full pool, passes through: it is a BackendUnavailable already).

    A class rather than a @contextmanager: it wraps every enqueue, and costs less so."""

    __slots__ = ("_settings",)

    def __init__(self, settings: RedisSettings) -> None:
        self._settings = settings

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(exc, _OUTAGE):  # BackendBusy is none of these: it passes as it is
            raise unreachable(self._settings, exc) from exc


_UNREACHABLE = "unreachable"
_OUT_OF_MEMORY = "out of memory"


def _condition(exc: BaseException) -> str | None:
    """The lasting condition `exc` shows (None: a one-off failure)."""
    if is_outage(exc):
        return _UNREACHABLE
    if is_out_of_memory(exc):
        return _OUT_OF_MEMORY
    return None


class RedisHealth:
    """How a worker reports Redis failures: an outage (Redis unreachable, or refusing
    writes at maxmemory) is one WARNING when it starts, naming the redacted URL and the
    first cause, and one when it ends, with its duration; the failures in between go to
    DEBUG. Corrupt queue state a script refused is an ERROR (see refused()); any other
    failure (a refused command, a full pool) a WARNING; both rate-limited per activity.

    The duration counts from the last call that succeeded before the outage (the last
    write, for maxmemory), not from the first failure's report: the first failed call
    spends the client's reconnects, backoff and timeouts before it fails, and all of
    that is outage. The worker calls Redis at least once per heartbeat interval, so the
    duration exceeds the outage by that much at most.

    Thread-safe: the lease keeper reports from its own thread."""

    def __init__(
        self,
        logger: logging.Logger,
        settings: RedisSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        problem_limit: int = 1,
        problem_window: float = 30.0,
    ) -> None:
        self.logger = logger
        self.where = settings.redacted_url()
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._condition = _UNREACHABLE
        self._last_ok: float | None = None
        """When a call last succeeded (None: none yet), on `clock`."""
        self._last_write: float | None = None
        """When a call that wrote last succeeded."""
        self.failures = 0
        """Failed calls during the current outage (0 when Redis is reachable)."""
        self.outages = 0
        """Outages seen since the worker started."""
        self._problems = RateLimit(problem_limit, problem_window, clock)

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, activity: str, exc: BaseException) -> None:
        """`activity` (e.g. "renewing leases") failed with `exc`."""
        condition = _condition(exc)
        if condition is None:
            allowed, earlier = self._problems.allow(activity)
            if allowed:
                note = f" ({earlier} more since the last report)" if earlier else ""
                self.logger.warning(
                    "%s failed: %s%s", activity, describe(exc), note,
                    extra={"activity": activity, "error": describe(exc), "suppressed": earlier},
                )  # fmt: skip
            return
        with self._lock:
            self.failures += 1
            starting = self._since is None
            if starting:
                # Redis answered until the last success: the outage is dated from there
                # (from now when nothing ever succeeded).
                last = self._last_write if condition == _OUT_OF_MEMORY else self._last_ok
                self._since = self._clock() if last is None else last
                self._condition = condition
                self.outages += 1
        if starting:
            state, until = (
                ("is out of memory", "memory is freed") if condition == _OUT_OF_MEMORY
                else ("unreachable", "it answers")
            )  # fmt: skip
            self.logger.warning(
                "Redis at %s %s (%s: %s); retrying quietly until %s",
                self.where, state, activity, describe(exc), until,
                extra={"redis": self.where, "activity": activity, "error": describe(exc)},
            )  # fmt: skip
        else:
            self.logger.debug("still %s (%s: %s)", condition, activity, describe(exc))

    def refused(
        self,
        activity: str,
        exc: CorruptQueueState,
        consequence: str,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        """A queue script refused corrupt state for `activity` (it wrote nothing): one
        ERROR naming the key, the problem and `consequence` (what becomes of the work),
        rate-limited per activity as failed() is. No outage: Redis answers, but the
        same call on the same data is refused again until someone repairs the key.
        `extra`: structured fields of the line (a job's id and trace ids)."""
        allowed, earlier = self._problems.allow(activity)
        if not allowed:
            self.logger.debug("still refused (%s): %s", activity, exc)
            return
        note = f" ({earlier} more since the last report)" if earlier else ""
        self.logger.error(
            "%s refused: %s; %s%s", activity, exc, consequence, note,
            extra={**(extra or {}), "activity": activity, "key": exc.key,
                   "problem": exc.problem, "suppressed": earlier},
        )  # fmt: skip

    def ok(self, *, wrote: bool = True) -> None:
        """A call succeeded: ends an outage if there was one (cheap when there was not).

        `wrote=False` for a call that may have only read (a chore that found nothing to
        do): at maxmemory reads still succeed, so it ends no out-of-memory condition."""
        now = self._clock()
        self._last_ok = now
        if wrote:
            self._last_write = now
        if self._since is None or (not wrote and self._condition == _OUT_OF_MEMORY):
            return
        with self._lock:
            since, failures = self._since, self.failures
            if since is None:
                return
            self._since = None
            self.failures = 0
        seconds = now - since
        again = "accepts writes" if self._condition == _OUT_OF_MEMORY else "reachable"
        self.logger.warning(
            "Redis at %s %s again after %.1fs (%d failed calls)",
            self.where, again, seconds, failures,
            extra={"redis": self.where, "outage_seconds": round(seconds, 3), "failures": failures},
        )  # fmt: skip

    def report_ongoing(self) -> None:
        """At shutdown: an outage still going on is said to last until now."""
        if self._since is not None:
            self.logger.warning(
                "Redis at %s still %s at shutdown, for %.1fs (%d failed calls)",
                self.where, self._condition, self._clock() - self._since, self.failures,
            )  # fmt: skip
