"""What one scrape read from Redis, as plain data, and the parser from raw replies to it.

Parsing never raises on bad data: a value that does not parse is skipped and counted
in `malformed`, so one corrupt field cannot hide the rest of the queue's metrics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from platform_common.jobs.keys import (
    DEFAULT_LATENCY_BUCKETS,
    ERROR_CLASS_PREFIX,
    MAX_ERROR_CLASSES,
    OTHER_ERROR_CLASS,
    STATS_COUNTERS,
    histogram_bucket_field,
    histogram_count_field,
    histogram_sum_field,
)
from platform_common.jobs.redis.memory_policy import MemoryInfo

from .catalogue import MAX_WORKERS_PER_TYPE
from .server_stats import ServerStats

__all__ = ["LatencyHistogram", "Snapshot", "TypeSnapshot", "WorkerBeat", "parse_type_reply"]


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """One duration histogram of one agent type (keys.STATS_HISTOGRAMS), in Prometheus'
    shape."""

    buckets: tuple[tuple[float, int], ...]
    """(upper bound in seconds, CUMULATIVE count), ascending, the last bound is +Inf."""
    sum: float
    """Sum of all observed latencies, seconds."""

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass(frozen=True, slots=True)
class TypeSnapshot:
    """One agent type's queue, read by one pipeline against one Redis TIME.

    Not a transaction: a job moving from the queue to processing between two reads may
    show in both or neither for one scrape, as for any sampled gauge."""

    agent_type: str
    queue_depth: int
    """ZCARD of the waiting set: jobs waiting to be taken."""
    in_progress: int
    """LLEN of the processing list: jobs a worker has taken."""
    delayed_depth: int
    """ZCARD of the delayed set: jobs waiting for a retry."""
    dead_letter_depth: int
    """LLEN of the dead-letter list."""
    counters: Mapping[str, int] = field(default_factory=dict)
    """Stats counter (keys.STATS_COUNTERS name) -> value; missing means never incremented,
    exported as 0; a malformed one is absent from `counters` and from the output."""
    latency: LatencyHistogram | None = None
    """Enqueue -> completion; None when the stats hash's latency fields are unusable."""
    wait: LatencyHistogram | None = None
    """The succeeding attempt's becoming due -> its start; None when unusable."""
    run: LatencyHistogram | None = None
    """The succeeding attempt's start -> completion; None when unusable."""
    error_classes: Mapping[str, int] = field(default_factory=dict)
    """Failed attempts by exception class (the queue caps the classes, see keys.py)."""
    oldest_age_seconds: float | None = 0.0
    """Age of the job at the right end of the queue; 0 when empty, None when unknown:
    always unknown for a non-empty queue today, because the enqueue time lives only in
    the job hash, which the exporter may not read (reader.py)."""
    active_workers: int = 0
    """Workers whose heartbeat is newer than the configured window (Redis TIME)."""
    last_heartbeat_seconds: float | None = None
    """Unix time of the newest heartbeat; None when no worker ever beat."""
    workers: tuple[WorkerBeat, ...] = ()
    """Each worker's last heartbeat, stalest first, at most MAX_WORKERS_PER_TYPE."""


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    worker: str
    """The worker's id (host:pid:... as the worker names itself)."""
    age_seconds: float
    """Seconds since its last heartbeat, by Redis TIME (never negative)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The whole read of one scrape."""

    types: tuple[TypeSnapshot, ...]
    types_dropped: int = 0
    """Agent types that exist but were not exported (cap reached)."""
    malformed: int = 0
    """Values skipped in this read because they did not parse."""
    round_trips: int = 1
    """Pipelines sent for this snapshot; each is one round trip per node (1 when steady)."""
    memory: Mapping[str, MemoryInfo] = field(default_factory=dict)
    """INFO memory of every primary, by node (host:port); empty when it was not read."""
    memory_problem: str | None = None
    """Why INFO memory could not be read (refused by the ACL, unparsable), else None."""
    server: Mapping[str, ServerStats] = field(default_factory=dict)
    """INFO clients and stats of every primary, by node; empty when not read."""


def parse_type_reply(
    agent_type: str,
    reply: Sequence[object],
    bucket_bounds: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
) -> tuple[TypeSnapshot, int]:
    """One type's replies, as the reader lays them out -> (TypeSnapshot, malformed count).

    Layout: now_ms (Redis TIME), queue, processing, delayed, dead, stats (HGETALL, flat or
    a dict), active workers, newest heartbeat score or None, oldest job's enqueued_at or
    None (unknown), and optionally the heartbeats as (worker, score) pairs.
    `bucket_bounds` are the queue's configured latency buckets (see `_histogram`).
    """
    now_ms, queue, processing, delayed, dead, stats, active, newest, oldest = reply[:9]
    beats: Sequence[tuple[object, object]] = reply[9] if len(reply) > 9 else ()  # type: ignore[assignment]
    malformed = 0
    fields = _pairs(stats)
    counters: dict[str, int] = {}
    for name in STATS_COUNTERS:
        if name not in fields:
            counters[name] = 0
            continue
        value = _count(fields[name])
        if value is None:
            malformed += 1
        else:
            counters[name] = value
    histograms: dict[str, LatencyHistogram | None] = {}
    for name in ("latency", "wait", "run"):
        histograms[name], errors = _histogram(fields, name, bucket_bounds)
        malformed += errors
    error_classes, errors = _error_classes(fields)
    malformed += errors
    workers, errors = _workers(beats, _int(now_ms))
    malformed += errors

    oldest_age: float | None = 0.0
    if oldest is not None:
        enqueued_ms = _number(oldest)
        if enqueued_ms is None or enqueued_ms < 0:
            malformed += 1
            oldest_age = None
        else:
            # A producer's clock may run ahead of Redis': never report a negative age.
            oldest_age = max(0.0, (_int(now_ms) - enqueued_ms) / 1000.0)
    elif _int(queue) > 0:
        oldest_age = None  # jobs wait but none has an arrival time (written by an old version)

    snapshot = TypeSnapshot(
        agent_type=agent_type,
        queue_depth=_int(queue),
        in_progress=_int(processing),
        delayed_depth=_int(delayed),
        dead_letter_depth=_int(dead),
        counters=counters,
        latency=histograms["latency"],
        wait=histograms["wait"],
        run=histograms["run"],
        error_classes=error_classes,
        oldest_age_seconds=oldest_age,
        active_workers=_int(active),
        last_heartbeat_seconds=None if newest is None else _heartbeat(newest),
        workers=workers,
    )
    return snapshot, malformed


def _error_classes(fields: Mapping[str, str]) -> tuple[dict[str, int], int]:
    """Failed attempts by class. The queue caps the classes; a hash holding more (written
    by hand) has the excess folded into `other`, so the label stays bounded here too."""
    malformed = 0
    counts: dict[str, int] = {}
    for name in sorted(fields):
        if not name.startswith(ERROR_CLASS_PREFIX):
            continue
        value = _count(fields[name])
        if value is None:
            malformed += 1
            continue
        error_class = name[len(ERROR_CLASS_PREFIX) :]
        named = len(counts) - (OTHER_ERROR_CLASS in counts)
        if error_class != OTHER_ERROR_CLASS and named >= MAX_ERROR_CLASSES:
            error_class = OTHER_ERROR_CLASS
        counts[error_class] = counts.get(error_class, 0) + value
    return counts, malformed


def _workers(
    beats: Sequence[tuple[object, object]], now_ms: int
) -> tuple[tuple[WorkerBeat, ...], int]:
    """Each heartbeat's age, stalest first (the ones on-call looks for), capped."""
    malformed = 0
    ages: list[WorkerBeat] = []
    for worker, score in beats:
        beat_ms = _number(score)
        if beat_ms is None:
            malformed += 1
            continue
        ages.append(WorkerBeat(str(worker), max(0.0, (now_ms - beat_ms) / 1000.0)))
    ages.sort(key=lambda beat: (-beat.age_seconds, beat.worker))
    return tuple(ages[:MAX_WORKERS_PER_TYPE]), malformed


def _histogram(
    fields: Mapping[str, str], name: str, bucket_bounds: Sequence[float]
) -> tuple[LatencyHistogram | None, int]:
    """Sum histogram `name`'s NON-cumulative bucket fields into cumulative `le` buckets.

    The queue only creates a bucket's field when an observation lands in it. Bounds
    without a field are filled with 0 when every field found is one of the configured
    bounds: then the `le` set is complete and stable from the first scrape (rate() and
    histogram_quantile need that). A field outside the configured bounds means the queue
    uses other buckets: then only the discovered ones are exported, which is always
    correct (a missing bound's count is unknown, not 0).
    """
    malformed = 0
    prefix = histogram_bucket_field(name, 0.0).split(":", 1)[0] + ":"  # "latency_le:"
    per_bound: dict[float, int] = {}
    for field_name, raw in fields.items():
        if not field_name.startswith(prefix):
            continue
        bound = _bound(field_name[len(prefix) :])
        value = _count(raw)
        if bound is None or value is None:
            malformed += 1
            continue
        per_bound[bound] = per_bound.get(bound, 0) + value
    expected = {float(bound) for bound in bucket_bounds} | {math.inf}
    if set(per_bound) <= expected:
        for bound in expected:
            per_bound.setdefault(bound, 0)
    per_bound.setdefault(math.inf, 0)
    running = 0
    buckets: list[tuple[float, int]] = []
    for bound in sorted(per_bound):
        running += per_bound[bound]
        buckets.append((bound, running))
    total = _number(fields.get(histogram_sum_field(name), "0"))
    if total is None or total < 0:
        # Without a sum the histogram would lie about the mean: leave it out.
        return None, malformed + 1
    count = fields.get(histogram_count_field(name))
    if count is not None and _count(count) != running:
        # The buckets are authoritative (the histogram must be self-consistent); a
        # count that disagrees with them is reported, not exported.
        malformed += 1
    return LatencyHistogram(tuple(buckets), total), malformed


def _pairs(flat: object) -> dict[str, str]:
    if isinstance(flat, dict):
        return {str(k): str(v) for k, v in flat.items()}
    items = list(flat) if isinstance(flat, list | tuple) else []
    return {str(items[i]): str(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _number(raw: object) -> float | None:
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _count(raw: object) -> int | None:
    """A counter value: a non-negative integer (HINCRBY writes nothing else)."""
    text = str(raw)
    if not text.isdigit():
        return None
    return int(text)


def _bound(text: str) -> float | None:
    if text == "+Inf":
        return math.inf
    value = _number(text)
    return value if value is not None and value >= 0 else None


def _heartbeat(raw: object) -> float | None:
    value = _number(raw)
    return None if value is None else value / 1000.0


def _int(raw: object) -> int:
    # LLEN/ZCARD/TIME arrive as integers from Redis itself, the worker count is the
    # reader's own: never malformed.
    return int(str(raw))
