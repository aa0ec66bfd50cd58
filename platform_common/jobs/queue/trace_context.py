"""Bounds on the trace context a job carries, as a worker reads it (queue.tracing).

A worker reads a stored value only within MAX_TRACE_CONTEXT_LENGTH and only if it is a
flat JSON object of strings (a nested value is never handed to the JSON parser). Tracing
is best-effort: an attempt never fails for it. What is dropped is counted per cause
(TraceContextDrops.counts) and logged, rate-limited per cause."""

from __future__ import annotations

import json
import logging
import re
from typing import Final

from .attempt_log import RateLimit

__all__ = ["MAX_TRACE_CONTEXT_LENGTH", "TraceContextDrops", "read_stored"]

MAX_TRACE_CONTEXT_LENGTH = 16384
"""The longest stored trace context a worker reads (the JSON of every header): room for
the W3C headers at their limits and a few headers of other propagators."""

OVERSIZED = "oversized"
"""The drop cause of a stored value over MAX_TRACE_CONTEXT_LENGTH (not read at all)."""
UNPARSABLE = "unparsable"
"""The drop cause of a stored value that is not a flat JSON object of strings."""

DROP_LOG_WINDOW = 60.0
"""Seconds of one rate-limit window of the drop warnings (per cause)."""

# A flat JSON object of strings, whitespace allowed: what a producer writes. Matched
# before parsing, so nesting never reaches the parser (a deep one raised RecursionError
# out of the worker's attempt). Possessive runs: linear, and a few us per context.
_WS = r"[ \t\n\r]*+"
_STRING = r'"(?:[^"\\\x00-\x1f]++|\\.)*+"'
_PAIR = rf"{_STRING}{_WS}:{_WS}{_STRING}{_WS}"
_FLAT_OBJECT: Final = re.compile(rf"{_WS}\{{{_WS}(?:{_PAIR}(?:,{_WS}{_PAIR})*)?\}}{_WS}")


class TraceContextDrops:
    """Counts what the bounds dropped, by cause, and logs it: at most `limit` WARNING
    lines per cause and DROP_LOG_WINDOW seconds, each with the cause's count so far (the
    count itself is never suppressed)."""

    def __init__(self, logger: logging.Logger, *, limit: int) -> None:
        self.counts: dict[str, int] = {}
        self._log = logger
        self._limits = RateLimit(limit, DROP_LOG_WINDOW)

    def dropped(self, cause: str, what: str, **fields: str) -> None:
        """Count one drop of `cause`; `what`: the line's text (what was dropped, why);
        `fields`: the line's `extra=` beside `trace_context_dropped` (the cause)."""
        count = self.counts[cause] = self.counts.get(cause, 0) + 1
        allowed, suppressed = self._limits.allow(cause)
        if not allowed:
            return
        left_out = f", {suppressed} such line(s) left out" if suppressed else ""
        self._log.warning(
            "%s (%s: %d dropped so far%s)", what, cause, count, left_out,
            extra={"trace_context_dropped": cause, **fields},
        )  # fmt: skip


def read_stored(stored: str) -> tuple[dict[str, str] | None, str, str]:
    """The headers of a stored trace context, or None; then the drop cause and why
    ("" when it was read)."""
    if len(stored) > MAX_TRACE_CONTEXT_LENGTH:
        return None, OVERSIZED, (
            f"{len(stored)} characters, over {MAX_TRACE_CONTEXT_LENGTH}: not read"
        )  # fmt: skip
    if _FLAT_OBJECT.fullmatch(stored) is None:
        return None, UNPARSABLE, "not a flat JSON object of strings"
    try:
        headers: dict[str, str] = json.loads(stored)
    except ValueError as exc:  # a bad escape: the pattern does not check them
        return None, UNPARSABLE, f"does not parse: {exc}"
    return headers, "", ""
