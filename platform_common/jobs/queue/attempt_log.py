"""How a worker reports failed attempts: safe error text, bounded tracebacks, rate-limited lines."""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "MAX_LOGGED_ERROR_LENGTH",
    "MAX_TRACEBACK_LENGTH",
    "AttemptLog",
    "JsonFormatter",
    "RateLimit",
    "bounded",
    "describe",
    "format_traceback",
    "safe_text",
]

MAX_TRACEBACK_LENGTH = 4000
"""Longest traceback kept with an attempt's error in its history (its last lines)."""
MAX_LOGGED_ERROR_LENGTH = 500
"""Longest error text in a log line (the job's history keeps more)."""


def safe_text(text: str) -> str:
    """`text` as valid UTF-8: lone surrogates (which no encoder accepts, so Redis, JSON
    and log streams all refuse them) become their `\\udc80` escape; the rest is unchanged."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def bounded(text: str, limit: int, *, keep_end: bool = False) -> str:
    """`text` cut to at most `limit` characters, saying so; `keep_end` keeps the tail
    (a traceback's last frames and its exception line say the most)."""
    if len(text) <= limit:
        return text
    marker = "...[truncated]..."
    room = max(limit - len(marker), 0)
    return marker + text[len(text) - room :] if keep_end else text[:room] + marker


def describe(exc: BaseException) -> str:
    """ "ClassName: message" (or just the class name), safe to store and to log. An
    exception whose __str__ itself raises is described, not re-raised."""
    try:
        text = str(exc)
    except Exception as problem:  # a broken __str__ must not take the worker with it
        text = f"<str() failed: {type(problem).__name__}>"
    name = type(exc).__name__
    return safe_text(f"{name}: {text}" if text else name)


def format_traceback(exc: BaseException, limit: int = MAX_TRACEBACK_LENGTH) -> str:
    """The exception's traceback (chained causes included), safe and at most `limit` long."""
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:  # same reason as in describe(): formatting must never raise
        text = describe(exc)
    return bounded(safe_text(text), limit, keep_end=True)


class RateLimit:
    """At most `limit` events per `window` seconds for each key; counts the rest.

    Thread-safe: the lease keeper's thread reports through the same limits as the loop."""

    def __init__(
        self, limit: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def allow(self, key: str) -> tuple[bool, int]:
        """(may this event be logged, lines suppressed since the last one that was)."""
        now = self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - window.started >= self.window:
                suppressed = window.suppressed if window else 0
                window = self._windows[key] = _Window(now, 0, suppressed)
            if window.emitted >= self.limit:
                window.suppressed += 1
                return False, 0
            window.emitted += 1
            suppressed, window.suppressed = window.suppressed, 0
            return True, suppressed

    def take_suppressed(self, *, only_closed: bool = True) -> dict[str, int]:
        """Counts of suppressed events per key, now reported (so zeroed): of closed
        windows only, or of every window (at shutdown)."""
        now = self._clock()
        taken = {}
        with self._lock:
            for key, window in self._windows.items():
                closed = now - window.started >= self.window
                if window.suppressed and (closed or not only_closed):
                    taken[key] = window.suppressed
                    window.suppressed = 0
        return taken


@dataclass(slots=True)
class _Window:
    started: float
    emitted: int
    suppressed: int


class AttemptLog:
    """One WARNING line per failed attempt, at most `limit` per agent type and `window`
    seconds (a poison flood cannot flood the log); lines left out are counted and the
    count is reported on the next line that is logged, or by `flush()`. The traceback
    follows its line at DEBUG."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        limit: int = 10,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.limits = RateLimit(limit, window, clock)
        self.logged = 0
        self.suppressed = 0

    def failed(
        self,
        *,
        job_id: str,
        agent_type: str,
        attempt: int | None,
        max_attempts: int | None,
        outcome: str,
        error: str,
        exc: BaseException | None = None,
        trace: dict[str, str] | None = None,
    ) -> bool:
        """Log one failed attempt (unless rate-limited); True if it was logged. `trace`:
        the attempt's `trace_id` and `span_id` (queue.tracing.JobTrace.log_fields), shown
        in the text and kept as fields."""
        allowed, earlier = self.limits.allow(agent_type)
        if not allowed:
            self.suppressed += 1
            return False
        self.logged += 1
        tried = f"{attempt or '?'}/{max_attempts or '?'}"
        error = bounded(safe_text(error), MAX_LOGGED_ERROR_LENGTH)
        error_type = error.partition(": ")[0]
        fields: dict[str, Any] = {
            "job_id": job_id,
            "agent_type": agent_type,
            "attempt": attempt,
            "max_attempts": max_attempts,
            "outcome": outcome,
            "error_type": error_type,
            "error": error,
            "suppressed": earlier,
        }
        traced = ""
        if trace:
            fields.update(trace)
            traced = "".join(f" {name}={value}" for name, value in trace.items())
        note = f" ({earlier} similar lines suppressed before this one)" if earlier else ""
        self.logger.warning(
            "attempt failed job=%s agent_type=%s attempt=%s outcome=%s%s error=%s%s",
            job_id, agent_type, tried, outcome, traced, error, note, extra=fields,
        )  # fmt: skip
        if exc is not None and self.logger.isEnabledFor(logging.DEBUG):
            # Formatted here rather than passed as exc_info: safe_text keeps a lone
            # surrogate in the message from breaking the log stream's encoder.
            self.logger.debug(
                "traceback of job=%s attempt=%s:\n%s",
                job_id, tried, format_traceback(exc, limit=100_000), extra=fields,
            )  # fmt: skip
        return True

    def flush(self, *, final: bool = False) -> None:
        """Report the lines suppressed in windows that closed (all of them if `final`)."""
        for agent_type, count in self.limits.take_suppressed(only_closed=not final).items():
            self.logger.warning(
                "suppressed %d attempt-failure lines of agent_type=%s (at most %d per %gs)",
                count, agent_type, self.limits.limit, self.limits.window,
                extra={"agent_type": agent_type, "suppressed": count},
            )  # fmt: skip


# Attributes every LogRecord has; anything else on a record came in through `extra=`.
_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and every `extra=` field
    (job_id, agent_type, attempt, ...), so the text and JSON forms carry the same facts."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        # ensure_ascii: every character escaped, so even a lone surrogate cannot break
        # the stream's encoder.
        return json.dumps(entry, default=str)
