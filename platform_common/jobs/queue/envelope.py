"""A waiting job packed into one value of the `queued` hash (keys.py), as
lua/queue_enqueue.lua writes it and lua/include/packed_header.lua reads it (for the claim,
which unpacks it, the expiry scripts and the enqueue's replay check):

    <enqueued_at ms>,<expires_at ms>,<ttl s>,<max_attempts>,<nonce>[,o|,h|,l]\\n
    <trace context>\\n<payload>

(one value: the line break after `[,o]` is only this page's).

Why packed: a hash of its own per waiting job, with a payload over
`hash-max-listpack-value` (64 bytes), is a real hashtable: a 0.5 KiB job cost 2.5-3x its
payload in Redis memory. One field of one per-type hash costs the payload plus about 150
bytes. The claim turns it into the job hash every later step reads.

A header ending in ",o" marks a job enqueued in deadline order (keys.py,
`deadline_mark`): it has no expiry bucket entry, the cleanup expires it from the queue
list's tail. Jobs of the previous layout have no such field. A header ending in ",h" or
",l" marks a job of priority high or low (queue/priority.py), which waits on its level's
list and is never in deadline order; a header without either (written before priorities
too) is a normal one.

The trace context is the producer's JSON of propagation headers (no newline in it), or
empty. The header is digits and the nonce (hex, ':' and digits), so neither holds a
comma or a newline, and the payload is everything after the second newline, as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptQueueState
from ..keys import QueueKeys
from .priority import priority_from_code

__all__ = ["QueuedJob", "queued_record_fields", "unpack_queued"]


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job of the `queued` hash, unpacked."""

    enqueued_at_ms: int
    expires_at_ms: int
    ttl_seconds: int
    max_attempts: int
    nonce: str
    trace_context: str | None
    payload: str
    ordered: bool = False
    """Enqueued in deadline order: expired from the queue list's tail, no bucket entry."""
    priority: str = "normal"
    """Its level (queue/priority.py), from ",h" or ",l" at the end of the header."""

    def record_fields(self) -> dict[str, str]:
        """The fields its job hash would hold, as the claim writes them (before its
        state, attempt and lease fields): what a reader of a record shows."""
        fields = {
            "payload": self.payload,
            "enqueued_at": str(self.enqueued_at_ms),
            "expires_at": str(self.expires_at_ms),
            "ttl": str(self.ttl_seconds),
            "max_attempts": str(self.max_attempts),
            "nonce": self.nonce,
            "state": "queued",
        }
        if self.trace_context:
            fields["trace_context"] = self.trace_context
        if self.priority != "normal":
            fields["priority"] = self.priority
        return fields


def unpack_queued(value: str) -> QueuedJob:
    """The job packed in `value`; ValueError naming what does not parse. The Lua reader
    (lua/include/packed_header.lua) takes the same layout, field by field
    (tests/queue/test_packed_header.py); it leaves the numbers' length to each script."""
    parts = value.split("\n", 2)
    if len(parts) != 3:
        raise ValueError("a queued job's packed value lacks its header lines")
    header, trace_context, payload = parts
    fields = header.split(",")
    mark = fields[5] if len(fields) == 6 else None
    if len(fields) != 5 and mark not in ("o", "h", "l"):
        raise ValueError(
            f"a queued job's header has {len(fields)} fields, not 5 (or 6 ending in 'o', "
            "'h' or 'l')"
        )
    enqueued, expires, ttl, max_attempts, nonce = fields[:5]
    numbers = {"enqueued_at": enqueued, "expires_at": expires, "ttl": ttl}
    numbers["max_attempts"] = max_attempts
    for name, text in numbers.items():
        if not text.isascii() or not text.isdigit() or len(text) > 15:
            raise ValueError(f"a queued job's {name} does not parse: {text[:40]!r}")
    return QueuedJob(
        enqueued_at_ms=int(enqueued),
        expires_at_ms=int(expires),
        ttl_seconds=int(ttl),
        max_attempts=int(max_attempts),
        nonce=nonce,
        trace_context=trace_context or None,
        payload=payload,
        ordered=mark == "o",
        priority=priority_from_code(mark),
    )


def queued_record_fields(keys: QueueKeys, job_id: str, packed: str) -> dict[str, str]:
    """The job hash fields of a job still packed in `keys.queued` (what a reader of a
    record shows); CorruptQueueState naming the key if the value does not parse."""
    try:
        return unpack_queued(packed).record_fields()
    except ValueError as exc:
        raise CorruptQueueState(keys.queued, f"field {job_id}: {exc}") from None
