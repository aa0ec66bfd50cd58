"""How a worker reports failed attempts: one rate-limited line each, and JSON log lines."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..queue.log_text import (
    MAX_LOGGED_ERROR_LENGTH,
    RateLimit,
    bounded,
    format_traceback,
    safe_text,
)

__all__ = ["AttemptLog", "JsonFormatter", "log"]

log = logging.getLogger("platform_common.jobs.worker")
"""The worker's one logger: its loop, its attempts and its chores log here."""


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
