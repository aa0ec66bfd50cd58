"""Log text that is safe to store and to log (valid UTF-8, bounded), and a rate limit
for repeated log lines: shared by the producer side, the worker and the CLI."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "MAX_LOGGED_ERROR_LENGTH",
    "MAX_TRACEBACK_LENGTH",
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
