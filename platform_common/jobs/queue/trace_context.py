"""Bounds on the trace context a job carries (queue.tracing stores and reads it): W3C's
limits per header, MAX_TRACE_CONTEXT_LENGTH for the whole (docs/user-guide.md, "Tracing",
gives them and the order of trimming). A producer stores at most that much of what its
propagator wrote; a worker reads a stored value only within MAX_TRACE_CONTEXT_LENGTH and
only if it is a flat JSON object of strings, then applies the same limits. Tracing is
best-effort: neither side refuses a job or fails an attempt for it. What is dropped is
counted per cause (TraceContextDrops.counts) and logged, rate-limited per cause."""

from __future__ import annotations

import json
import logging
import re
from typing import Final

from .log_text import RateLimit

__all__ = [
    "MAX_BAGGAGE_BYTES",
    "MAX_TRACEPARENT_LENGTH",
    "MAX_TRACESTATE_LENGTH",
    "MAX_TRACESTATE_MEMBERS",
    "MAX_TRACESTATE_MEMBER_LENGTH",
    "MAX_TRACE_CONTEXT_LENGTH",
    "TraceContextDrops",
    "bounded_json",
    "read_stored",
    "trim_to_w3c",
]

MAX_TRACEPARENT_LENGTH = 55
"""A W3C traceparent of version 00: `00-<32 hex>-<16 hex>-<2 hex>`."""
MAX_TRACESTATE_MEMBERS = 32
MAX_TRACESTATE_LENGTH = 512
"""What W3C asks every vendor to propagate of a tracestate (members and characters)."""
MAX_TRACESTATE_MEMBER_LENGTH = 128
"""Tracestate members longer than this are the first W3C asks to drop when trimming."""
MAX_BAGGAGE_BYTES = 8192
"""W3C's baggage size every platform must propagate (and the OpenTelemetry propagator's cap)."""
MAX_TRACE_CONTEXT_LENGTH = 16384
"""The longest stored trace context (the JSON of every header): room for the W3C headers
at their limits and a few headers of other propagators. A worker reads none longer."""

TRACEPARENT, TRACESTATE, BAGGAGE = "traceparent", "tracestate", "baggage"
OTHER_HEADERS = "other_headers"
"""The drop cause of headers beyond the W3C ones that did not fit MAX_TRACE_CONTEXT_LENGTH."""
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


def bounded_json(headers: dict[str, str], *, keep: str = "") -> tuple[str, dict[str, str]]:
    """The JSON to store for `headers` (trimmed in place to the limits), and what was
    dropped: a description per cause. `keep`: a header never dropped (the queue's own,
    short one)."""
    dropped = trim_to_w3c(headers)
    text = json.dumps(headers, separators=(",", ":"))
    if len(text) <= MAX_TRACE_CONTEXT_LENGTH:
        return text, dropped
    names = _fit(headers, keep)
    over = f"dropped: the trace context would exceed {MAX_TRACE_CONTEXT_LENGTH} characters"
    others = [name for name in names if name not in (TRACESTATE, BAGGAGE)]
    if others:
        shown = ", ".join(repr(name[:64]) for name in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        dropped[OTHER_HEADERS] = f"header(s) {shown}{more} {over}"
    for name in (BAGGAGE, TRACESTATE):
        if name in names:
            dropped[name] = f"{name} {over}"
    return json.dumps(headers, separators=(",", ":")), dropped


def trim_to_w3c(headers: dict[str, str]) -> dict[str, str]:
    """Trim the W3C headers of `headers` (in place) to W3C's limits; what was dropped,
    a description per cause."""
    dropped: dict[str, str] = {}
    parent = headers.get(TRACEPARENT)
    if parent is not None and len(parent) > MAX_TRACEPARENT_LENGTH:
        del headers[TRACEPARENT]
        dropped[TRACEPARENT] = (
            f"traceparent of {len(parent)} characters dropped (over {MAX_TRACEPARENT_LENGTH})"
        )
    state = headers.get(TRACESTATE)
    if state is not None and (
        len(state) > MAX_TRACESTATE_LENGTH or state.count(",") >= MAX_TRACESTATE_MEMBERS
    ):
        members, total = _trimmed_tracestate(state)
        kept = ",".join(members)
        _replace(headers, TRACESTATE, kept)
        dropped[TRACESTATE] = (
            f"tracestate of {total} members and {len(state)} characters trimmed to "
            f"{len(members)} members and {len(kept)} characters (at most "
            f"{MAX_TRACESTATE_MEMBERS} and {MAX_TRACESTATE_LENGTH})"
        )
    carried = headers.get(BAGGAGE)
    if carried is not None and _size(carried) > MAX_BAGGAGE_BYTES:
        kept = _trimmed_baggage(carried)
        _replace(headers, BAGGAGE, kept)
        dropped[BAGGAGE] = (
            f"baggage of {_size(carried)} bytes trimmed to {_size(kept)} (at most "
            f"{MAX_BAGGAGE_BYTES}, whole members)"
        )
    return dropped


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


def _replace(headers: dict[str, str], name: str, value: str) -> None:
    if value:
        headers[name] = value
    else:
        del headers[name]


def _trimmed_tracestate(state: str) -> tuple[list[str], int]:
    """The members of the tracestate within the limits, and how many it had. W3C:
    members over MAX_TRACESTATE_MEMBER_LENGTH go first, then members from the end."""
    members = [member.strip(" \t") for member in state.split(",")]
    members = [member for member in members if member]  # W3C allows empty list members
    kept: list[str] = []
    length = -1  # no comma before the first member
    for member in members:
        if len(member) > MAX_TRACESTATE_MEMBER_LENGTH:
            continue
        length += 1 + len(member)
        if len(kept) == MAX_TRACESTATE_MEMBERS or length > MAX_TRACESTATE_LENGTH:
            break
        kept.append(member)
    return kept, len(members)


def _trimmed_baggage(carried: str) -> str:
    """The longest run of whole members from the start within MAX_BAGGAGE_BYTES."""
    size = -1
    end = 0
    for member in carried.split(","):
        size += 1 + _size(member)
        if size > MAX_BAGGAGE_BYTES:
            break
        end += len(member) + 1
    return carried[: max(end - 1, 0)]


def _size(text: str) -> int:
    """UTF-8 bytes of `text` (its length when ASCII, which costs no encoding)."""
    return len(text) if text.isascii() else len(text.encode())


def _fit(headers: dict[str, str], keep: str) -> list[str]:
    """Drop headers (in place) until their JSON fits MAX_TRACE_CONTEXT_LENGTH: those
    beyond the W3C ones, last first, then baggage, then tracestate (a traceparent within
    its limit always fits); the names dropped. Escapes count: JSON writes a non-ASCII
    character as up to 12."""
    costs = {
        name: len(json.dumps(name)) + len(json.dumps(value)) + 2 for name, value in headers.items()
    }
    total = 1 + sum(costs.values())  # braces, a colon and a comma per pair, minus one comma
    kept = {TRACEPARENT, TRACESTATE, BAGGAGE, keep} if keep else {TRACEPARENT, TRACESTATE, BAGGAGE}
    order = [name for name in reversed(headers) if name not in kept] + [BAGGAGE, TRACESTATE]
    dropped: list[str] = []
    for name in order:
        if total <= MAX_TRACE_CONTEXT_LENGTH:
            break
        if name in headers:
            total -= costs[name]
            del headers[name]
            dropped.append(name)
    return dropped
