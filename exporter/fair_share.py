"""How fair share's keys wait: the scan the exporter runs for a type whose ring holds
entries, and what its reply means.

The ring (keys.py, `jobs:{type}:fair`) holds every fairness key with jobs waiting; each
key's list holds its job ids, oldest at the tail. Nothing keeps a per-key age, so the
scan (lua/queue_fair_scan.lua, read only) reads each key's oldest waiting job's enqueue
time, for at most FAIR_SCAN_KEYS keys: one script call per such type and scrape, in one
more round trip for all of them. A type whose ring is empty or absent costs only the
LLEN of type_reads.py, and gets no scan.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.metric_catalogue import FAIR_SCAN_KEYS
from platform_common.jobs.redis.replies import finite_number
from platform_common.jobs.redis.script import Script, ScriptCall

from .label_values import capped_label_value

__all__ = ["FAIR_WALK_IDS", "FairShare", "fair_scan_call", "parse_fair_scan"]

FAIR_WALK_IDS = 10
"""Ids the scan walks per key from its list's tail past strays (jobs that expired or
were cancelled while they waited) before it calls the key's age unknown."""

# Script.named, not QueueScripts: the queue package imports the whole client (a quarter
# second at start), and the exporter needs none of it. The same cached object.
_FAIR_SCAN = Script.named("queue_fair_scan")

_HEADER = 4
"""Reply items before the per-key triples: ring length, TIME ms, shared entry, skipped."""


@dataclass(frozen=True, slots=True)
class FairShare:
    """One type's fair share keys as one scan read them."""

    keys_waiting: int
    """Fairness keys on the ring (its length, less the shared queue's own turn)."""
    oldest_wait_seconds: float | None
    """The longest wait of any read key's oldest waiting job; None when none is known."""
    median_wait_seconds: float | None
    """The median over read keys of their oldest waiting job's wait; None likewise."""
    top_backlogs: tuple[tuple[str, int], ...] = ()
    """(key as a label value, jobs on its list) of the keys with the largest backlog, at
    most the exporter's --fair-key-top, largest first."""


def fair_scan_call(keys: QueueKeys) -> ScriptCall:
    """The scan of `keys`' ring, read only (EVALSHA_RO: the exporter's ACL user)."""
    return _FAIR_SCAN.call(
        [keys.fair_ring, keys.queued],
        [FAIR_SCAN_KEYS, keys.fair_list(""), keys.job(""), FAIR_WALK_IDS],
        readonly=True,
    )


def parse_fair_scan(reply: object, top: int) -> tuple[FairShare | None, int]:
    """(FairShare, malformed count) of a scan's reply; (None, 1) for a reply that is not
    the scan's (malformed as a whole). A per-key list of another type, or an enqueue
    time that is no number, counts as malformed and leaves that key out."""
    if not isinstance(reply, list | tuple) or len(reply) < _HEADER:
        return None, 1
    length, now, shared, skipped = reply[:_HEADER]
    rest = reply[_HEADER:]
    if not all(type(v) is int for v in (length, now, shared, skipped)) or len(rest) % 3:
        return None, 1
    malformed = skipped
    waits: list[float] = []
    backlogs: list[tuple[int, str]] = []
    for index in range(0, len(rest), 3):
        key, backlog, enqueued = rest[index : index + 3]
        name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        backlogs.append((int(backlog), name))
        if enqueued is None:
            continue  # only strays among the ids walked: its age is unknown
        enqueued_ms = finite_number(enqueued.decode() if isinstance(enqueued, bytes) else enqueued)
        if enqueued_ms is None:
            malformed += 1
            continue
        # A producer's clock may run ahead of Redis': never a negative wait.
        waits.append(max(0.0, (now - enqueued_ms) / 1000.0))
    fair = FairShare(
        keys_waiting=max(0, length - shared),
        oldest_wait_seconds=max(waits) if waits else None,
        median_wait_seconds=statistics.median(waits) if waits else None,
        top_backlogs=_top(backlogs, top),
    )
    return fair, malformed


def _top(backlogs: Sequence[tuple[int, str]], top: int) -> tuple[tuple[str, int], ...]:
    """The `top` largest backlogs, ties by key (a stable set of series between scrapes)."""
    ranked = sorted(backlogs, key=lambda pair: (-pair[0], pair[1]))[:top]
    return tuple((capped_label_value(name), backlog) for backlog, name in ranked)
