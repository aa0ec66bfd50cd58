"""Redis failures in the queue's terms: typed errors at the API, one line per outage in a worker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from redis.exceptions import (
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import BackendBusy, BackendUnavailable
from ..redis.url import RedisSettings
from .attempt_log import RateLimit, describe

__all__ = [
    "TRANSIENT",
    "RedisHealth",
    "backend_errors",
    "is_outage",
    "is_script_error",
    "unreachable",
]

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
    if isinstance(exc, BackendBusy):
        return False  # the pool is full: Redis itself answers
    return isinstance(exc, (*_OUTAGE, BackendUnavailable))


def is_script_error(exc: BaseException) -> bool:
    """A Lua script failed while running (e.g. on a stored value it cannot read):
    running it again on the same data fails again, so it is no outage to wait out."""
    return isinstance(exc, ResponseError) and "user_script" in str(exc)


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


class RedisHealth:
    """How a worker reports Redis failures: an outage (Redis unreachable) is one WARNING
    when it starts, naming the redacted URL and the first cause, and one when it ends,
    with its duration; the failures in between go to DEBUG. Any other failure (a
    refused command, a full pool) is a WARNING rate-limited per activity.

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
        if not is_outage(exc):
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
                self._since = self._clock()
                self.outages += 1
        if starting:
            self.logger.warning(
                "Redis at %s unreachable (%s: %s); retrying quietly until it answers",
                self.where, activity, describe(exc),
                extra={"redis": self.where, "activity": activity, "error": describe(exc)},
            )  # fmt: skip
        else:
            self.logger.debug("still unreachable (%s: %s)", activity, describe(exc))

    def ok(self) -> None:
        """A call succeeded: ends an outage if there was one (cheap when there was not)."""
        if self._since is None:
            return
        with self._lock:
            since, failures = self._since, self.failures
            if since is None:
                return
            self._since = None
            self.failures = 0
        seconds = self._clock() - since
        self.logger.warning(
            "Redis at %s reachable again after %.1fs (%d failed calls)",
            self.where, seconds, failures,
            extra={"redis": self.where, "outage_seconds": round(seconds, 3), "failures": failures},
        )  # fmt: skip

    def report_ongoing(self) -> None:
        """At shutdown: an outage still going on is said to last until now."""
        if self._since is not None:
            self.logger.warning(
                "Redis at %s still unreachable at shutdown, for %.1fs (%d failed calls)",
                self.where, self._clock() - self._since, self.failures,
            )  # fmt: skip
