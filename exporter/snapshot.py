"""What one scrape read from Redis, as plain data, and the parser from raw replies to it.

Parsing never raises on bad data: a value that does not parse is skipped and counted
in `malformed`, so one corrupt field cannot hide the rest of the queue's metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from platform_common.jobs.keys import FAIR_BY_KEYS
from platform_common.jobs.metric_catalogue import HEARTBEAT_CLOCK_TOLERANCE_MS, MAX_WORKERS_PER_TYPE
from platform_common.jobs.redis.memory_policy import MemoryInfo
from platform_common.jobs.redis.replies import finite_number, hash_fields

from .fair_share import FairShare
from .label_values import capped_label_value
from .server_stats import ServerStats
from .stats_hash import LatencyHistogram, StatsReading

__all__ = [
    "HEARTBEAT_CLOCK_TOLERANCE_MS",
    "FairShare",
    "LatencyHistogram",
    "Snapshot",
    "TypeSnapshot",
    "WorkerBeat",
    "type_snapshot",
    "within_clock_tolerance",
]


def within_clock_tolerance(beat_ms: float, now_ms: int) -> bool:
    """A heartbeat dated `beat_ms` is believed at Redis TIME `now_ms` (see
    HEARTBEAT_CLOCK_TOLERANCE_MS)."""
    return beat_ms <= now_ms + HEARTBEAT_CLOCK_TOLERANCE_MS


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
    """StatsReading.counters: a missing counter is 0, a malformed one absent."""
    latency: LatencyHistogram | None = None
    """Enqueue -> completion; None when the stats hash's latency fields are unusable."""
    wait: LatencyHistogram | None = None
    """The succeeding attempt's becoming due -> its start; None when unusable."""
    run: LatencyHistogram | None = None
    """The succeeding attempt's start -> completion; None when unusable."""
    error_classes: Mapping[str, int] = field(default_factory=dict)
    """StatsReading.error_classes: failed attempts by (capped) exception class."""
    oldest_age_seconds: float | None = 0.0
    """Age of the oldest waiting job, by its arrival time (type_reads.py); 0 when none
    waits, None when unknown (jobs wait but none has an arrival time)."""
    active_workers: int = 0
    """Workers whose heartbeat is newer than the configured window (Redis TIME), and
    not in the future (HEARTBEAT_CLOCK_TOLERANCE_MS)."""
    last_heartbeat_seconds: float | None = None
    """Unix time of the newest heartbeat not in the future; None when there is none."""
    workers: tuple[WorkerBeat, ...] = ()
    """Each worker's last heartbeat, stalest first, at most MAX_WORKERS_PER_TYPE."""
    paused: bool = False
    """Whether the type is paused (JobQueue.pause): workers start none of its jobs."""
    # The limits (queue/limits.py) are None when unset, or malformed (counted).
    rate_limit: float | None = None
    """Job starts per second its rate limit allows."""
    max_running_limit: int | None = None
    """Its cap on jobs running at once."""
    depth_by_priority: Mapping[str, int] = field(default_factory=dict)
    """queue_depth by priority level (high, normal, low); empty when not read."""
    max_running_per_key_limit: int | None = None
    """Its cap on jobs of one fairness key running at once."""
    fair_by: str | None = None
    """The payload field fair share goes by (one of FAIR_BY_KEYS); None: it is off."""
    fair_keys_waiting: int = 0
    """Fair share's keys with jobs waiting (HLEN of the ring's since hash): a type with
    none has no more of fair share read."""
    fair: FairShare | None = None
    """How its fairness keys wait (fair_share.py); None when not read (no key waits, or
    the read was refused: counted)."""


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    worker: str
    """The worker's id as it names itself (host:pid:...), as a capped label value."""
    age_seconds: float
    """Seconds since its last heartbeat, by Redis TIME (never negative)."""
    jobs_in_progress: int | None = None
    """Jobs it was running at that heartbeat (the worker_jobs hash); None when unknown:
    an older worker, or a malformed value."""


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


def type_snapshot(
    agent_type: str,
    now_ms: int,
    depths: tuple[object, object, object, object],
    stats: StatsReading,
    active: object,
    newest: object | None,
    oldest: object | None,
    beats: Sequence[tuple[object, object]],
    worker_jobs: object = None,
    paused: bool = False,
    limits: object = None,
    level_depths: tuple[object, object] | None = None,
    fair_keys_waiting: object = 0,
) -> tuple[TypeSnapshot, int]:
    """One type's TypeSnapshot from its read parts -> (TypeSnapshot, malformed count).

    `depths`: queue, processing, delayed and dead-letter counts as Redis sent them;
    `active`: workers beating within the window; `newest`: the newest heartbeat's score
    or None; `oldest`: the oldest waiting job's arrival (ms) or None; `beats`: every
    heartbeat as (worker, score); the rest as TypeReplies has them (None: not read).
    Normal priority's depth is the depth less high's and low's (never below 0: the reads
    are not one transaction).
    """
    malformed = stats.malformed
    configured, bad_limits = _limits(limits)
    malformed += bad_limits
    workers, errors = _workers(beats, now_ms, hash_fields(worker_jobs))
    malformed += errors
    queue, processing, delayed, dead = depths
    depth = _int(queue)
    oldest_age: float | None = 0.0
    if oldest is not None:
        enqueued_ms = finite_number(oldest)
        if enqueued_ms is None or enqueued_ms < 0:
            malformed += 1
            oldest_age = None
        else:
            # A producer's clock may run ahead of Redis': never report a negative age.
            oldest_age = max(0.0, (now_ms - enqueued_ms) / 1000.0)
    elif depth > 0:
        oldest_age = None  # jobs wait but none has an arrival time (written by an old version)
    histograms = stats.histograms
    snapshot = TypeSnapshot(
        agent_type=agent_type,
        queue_depth=depth,
        in_progress=_int(processing),
        delayed_depth=_int(delayed),
        dead_letter_depth=_int(dead),
        counters=stats.counters,
        latency=histograms["latency"],
        wait=histograms["wait"],
        run=histograms["run"],
        error_classes=stats.error_classes,
        oldest_age_seconds=oldest_age,
        active_workers=_int(active),
        last_heartbeat_seconds=None if newest is None else _heartbeat(newest),
        workers=workers,
        paused=paused,
        rate_limit=configured.rate,
        max_running_limit=configured.max_running,
        depth_by_priority=_by_priority(depth, level_depths),
        max_running_per_key_limit=configured.max_running_per_key,
        fair_by=configured.fair_by,
        fair_keys_waiting=_int(fair_keys_waiting),
    )
    return snapshot, malformed


@dataclass(frozen=True, slots=True)
class _Configured:
    rate: float | None = None
    max_running: int | None = None
    max_running_per_key: int | None = None
    fair_by: str | None = None


def _limits(reply: object) -> tuple[_Configured, int]:
    """(the limits, malformed count) of HMGET type_reads.LIMITS_READ; a number that is not
    a whole number from 1, or a fair_by that is none of FAIR_BY_KEYS, is skipped and
    counted, as the claim refuses it."""
    if not isinstance(reply, list | tuple) or len(reply) != 5:
        return _Configured(), 0
    texts = [raw.decode(errors="replace") if isinstance(raw, bytes) else raw for raw in reply]
    parsed: list[int | None] = []
    malformed = 0
    for text in texts[:4]:
        if text is None:
            parsed.append(None)
        elif isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 15:
            parsed.append(int(text) or None)
            malformed += int(text) == 0
        else:
            parsed.append(None)
            malformed += 1
    count, interval, max_running, per_key = parsed
    fair_by = texts[4]
    if fair_by == "":  # queue_limits.lua deletes the field; an empty one is off too
        fair_by = None
    if fair_by is not None and fair_by not in FAIR_BY_KEYS:
        fair_by = None
        malformed += 1
    rate = None if count is None or interval is None else count * 1000 / interval
    return _Configured(rate, max_running, per_key, fair_by), malformed


def _by_priority(depth: int, level_depths: tuple[object, object] | None) -> dict[str, int]:
    if level_depths is None:
        return {}
    high, low = (_int(length) for length in level_depths)
    return {"high": high, "normal": max(0, depth - high - low), "low": low}


def _workers(
    beats: Sequence[tuple[object, object]], now_ms: int, jobs: Mapping[str, str]
) -> tuple[tuple[WorkerBeat, ...], int]:
    """Each heartbeat's age and jobs in progress, stalest first (the ones on-call looks
    for), capped: a worker's count is shown for exactly the workers whose age is. A
    heartbeat that does not parse or lies in the future is skipped and counted."""
    malformed = 0
    ages: list[tuple[float, str]] = []
    for worker, score in beats:
        beat_ms = finite_number(score)
        if beat_ms is None or not within_clock_tolerance(beat_ms, now_ms):
            malformed += 1
            continue
        ages.append((max(0.0, (now_ms - beat_ms) / 1000.0), str(worker)))
    ages.sort(key=lambda age_worker: (-age_worker[0], age_worker[1]))
    shown = []
    for age, worker in ages[:MAX_WORKERS_PER_TYPE]:
        raw = jobs.get(worker)  # the hash is keyed by the full id, not the label value
        if raw is not None and not (raw.isascii() and raw.isdigit()):
            malformed += 1
            raw = None
        count = None if raw is None else int(raw)
        shown.append(WorkerBeat(capped_label_value(worker), age, count))
    return tuple(shown), malformed


def _heartbeat(raw: object) -> float | None:
    value = finite_number(raw)
    return None if value is None else value / 1000.0


def _int(raw: object) -> int:
    # LLEN/HLEN/ZCARD/TIME arrive as integers from Redis itself, the worker count is the
    # reader's own: never malformed.
    return raw if type(raw) is int else int(str(raw))
