"""`python -m platform_common.jobs_exporter` or `queue-exporter`: settings, a first read of
Redis, then uvicorn. A failure to start is one line on stderr (`--debug`: the traceback
too)."""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import ssl
import sys
import traceback
from collections.abc import Sequence
from typing import Any, ClassVar

if __name__ == "__main__":
    # `python -m`: through the console script's entry point, which imports this module
    # again, so that an `exporter` extra missing below is one line, not a traceback.
    from platform_common.jobs_exporter.entry_point import main as entry_point

    sys.exit(entry_point())

import uvicorn
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    RedisError,
)
from uvicorn.protocols.http.h11_impl import H11Protocol

from platform_common.jobs.errors import ConfigurationError

from .app import create_app
from .reader import SnapshotReader, make_exporter_client
from .settings import ExporterSettings

__all__ = [
    "HEADER_TIMEOUT_SECONDS",
    "ConnectionGuard",
    "GuardedH11Protocol",
    "connection_cap",
    "guarded_protocol",
    "listen_backlog",
    "main",
]

HEADER_TIMEOUT_SECONDS = 5.0
"""A client must have sent a whole request this long after connecting, or after its
previous response; Prometheus sends its request at once. uvicorn has no such deadline:
its keep-alive timeout only covers idle time between requests, and each byte resets it,
so a client trickling (or never finishing) its headers holds a connection forever."""

_MOST_CONNECTIONS = 4096  # what the exporter's few scrapers and readers could ever need


def listen_backlog(open_files: int) -> int:
    """The listen backlog under a file-descriptor limit of `open_files`: also how many
    connections asyncio accepts in one burst before any reaches the protocol (and the
    cap), so an eighth of the limit, at most uvicorn's default 2048."""
    if open_files == resource.RLIM_INFINITY:
        return 2048
    return max(16, min(2048, open_files // 8))


def connection_cap(open_files: int) -> int:
    """How many HTTP connections to keep open under a file-descriptor limit of
    `open_files`, so that a flood of them never leaves the process unable to accept a
    scrape or to open a connection to Redis."""
    if open_files == resource.RLIM_INFINITY:
        return _MOST_CONNECTIONS
    # Kept free: Redis connections (4 per node), the listening socket, logs, runbook
    # files, and the accept bursts in flight (accepted, not yet capped: up to four).
    reserved = 64 + 4 * listen_backlog(open_files)
    return max(1, min(_MOST_CONNECTIONS, open_files - reserved))


log = logging.getLogger("exporter")


class ConnectionGuard:
    """The open connections of one server, in the order they arrived and in the order
    they began waiting for a request.

    When a new connection takes the count over `max_connections`, the one waiting
    longest for a request is closed (a half-open or idle one), else the oldest: the
    newcomer, e.g. a scrape, is always served. A bounded count alone (uvicorn's
    `limit_concurrency`) would count the half-open connections too and answer the scrape
    503, which is what must not happen."""

    def __init__(self, *, header_timeout: float, max_connections: int) -> None:
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self._open: dict[GuardedH11Protocol, None] = {}  # dicts keep insertion order
        self._waiting: dict[GuardedH11Protocol, None] = {}
        self.evicted = 0
        self.timed_out = 0

    def opened(self, connection: GuardedH11Protocol) -> None:
        self._open[connection] = None
        while len(self._open) > self.max_connections:
            victim = self._oldest(self._waiting, connection) or self._oldest(self._open, connection)
            if victim is None:
                return
            self.forget(victim)  # now: its connection_lost comes a loop iteration later
            self.evicted += 1
            victim.drop()

    def waiting(self, connection: GuardedH11Protocol) -> None:
        self._waiting.pop(connection, None)
        self._waiting[connection] = None  # last: it has waited least

    def serving(self, connection: GuardedH11Protocol) -> None:
        self._waiting.pop(connection, None)

    def forget(self, connection: GuardedH11Protocol) -> None:
        self._open.pop(connection, None)
        self._waiting.pop(connection, None)

    @staticmethod
    def _oldest(
        connections: dict[GuardedH11Protocol, None], spare: GuardedH11Protocol
    ) -> GuardedH11Protocol | None:
        return next((c for c in connections if c is not spare), None)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with what it lacks: a deadline to receive each request, and
    a cap on open connections (ConnectionGuard). Use `guarded_protocol()` to get a
    subclass with its own guard."""

    guard: ClassVar[ConnectionGuard]
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request()
        self.guard.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        self.guard.forget(self)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._serving():  # a whole request arrived: the app's time is not ours to limit
            self._cancel_deadline()
            self.guard.serving(self)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # (super() may already have started a pipelined request.)
        if not self.transport.is_closing() and not self._serving():
            self._await_request()

    def drop(self) -> None:
        """Close at once: abort, not close, so bytes a client never reads cannot keep
        the descriptor open. Nothing is lost unless a request is in progress, which
        happens only when every open connection is serving one (see ConnectionGuard)."""
        self._cancel_deadline()
        self.transport.abort()

    def _serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _await_request(self) -> None:
        self._cancel_deadline()
        self.guard.waiting(self)
        self._deadline = self.loop.call_later(self.guard.header_timeout, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if not self._serving() and not self.transport.is_closing():
            self.guard.timed_out += 1
            self.drop()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def guarded_protocol(*, header_timeout: float, max_connections: int) -> type[GuardedH11Protocol]:
    """A GuardedH11Protocol subclass with a guard of its own (one per server)."""
    guard = ConnectionGuard(header_timeout=header_timeout, max_connections=max_connections)
    attributes: dict[str, Any] = {"guard": guard}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attributes)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the exporter until SIGINT/SIGTERM; its exit status: 2 on a bad setting, 1 when
    Redis refuses it at start (a wrong password or ACL user, a TLS handshake it rejects).
    An unreachable Redis is not fatal: the exporter logs it once and serves
    `queue_exporter_redis_up 0`, as through any later outage."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _DEBUG_FLAG in args
    args = [arg for arg in args if arg != _DEBUG_FLAG]
    try:
        return _serve(args)
    except ConfigurationError as exc:
        # The message names the flag or variable; RedisSettings never echoes a password.
        _report(exc, f"configuration error: {exc}", debug=debug)
        return 2
    except _RedisRefused as exc:
        _report(exc, str(exc), debug=debug)
        return 1
    except Exception as exc:
        _report(exc, f"unexpected {type(exc).__name__}: {exc} (--debug shows the traceback)",
                debug=debug)  # fmt: skip
        return 1


_DEBUG_FLAG = "--debug"
# Redis answered and said no (WRONGPASS, NOAUTH, NOPERM), or the TLS handshake failed:
# waiting fixes neither, so the exporter does not start. (Other error replies, BUSY or
# LOADING, pass: the scrapes report them as an outage.)
_REFUSALS = (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    ssl.SSLError,
)


class _RedisRefused(Exception):
    """Redis refused the exporter's first read; the message is the one-line report."""


def _report(exc: Exception, message: str, *, debug: bool) -> None:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    print(f"queue-exporter: error: {' '.join(message.split())}", file=sys.stderr)


def _refusal(exc: BaseException) -> BaseException | None:
    """The refusal behind `exc` (redis-py wraps an SSL error in a ConnectionError)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, _REFUSALS):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


async def _first_read(settings: ExporterSettings) -> None:
    """One snapshot read, as a scrape does it: raises _RedisRefused on a refusal, logs an
    unreachable Redis (once; the scrapes log when it comes back)."""
    client = make_exporter_client(settings)
    where = settings.redis.redacted_url()
    try:
        async with asyncio.timeout(settings.redis_timeout):
            await SnapshotReader(client, settings).read()
    except (RedisError, OSError, TimeoutError) as exc:
        refusal = _refusal(exc)
        if refusal is not None:
            raise _RedisRefused(
                f"Redis at {where} refused the exporter: {type(refusal).__name__}: {refusal}"
            ) from exc
        problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        log.warning(
            "Redis at %s unreachable at start (%s); serving queue_exporter_redis_up 0 until "
            "it answers",
            where,
            problem,
        )
    finally:
        await client.aclose()


def _serve(args: list[str]) -> int:
    settings = ExporterSettings.from_args(args)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(_first_read(settings))
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    cap = connection_cap(open_files)
    log.info(
        "serving on %s:%d (at most %d connections), Redis %s",
        settings.host,
        settings.port,
        cap,
        settings.redis.redacted_url(),
    )
    app = create_app(settings)
    # Everything made so far (modules, settings, the app) lives as long as the process:
    # out of the cyclic collector's reach, its full collections walk only what scrapes
    # make (a 1,000-type scrape makes tens of thousands of objects).
    gc.freeze()
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # Prometheus scrapes every few seconds: access lines are noise
        http=guarded_protocol(header_timeout=HEADER_TIMEOUT_SECONDS, max_connections=cap),
        ws="none",  # no route upgrades; a websocket would escape the guard
        backlog=listen_backlog(open_files),
    )
    return 0
