"""What the exporter reads of one agent type: the commands, and what each reply means.

The one place that knows the queue's per-type key layout on the read side: a change of
layout (how the depth or the oldest waiting job's arrival is kept) changes
`type_commands` and `TypeReplies.of` here, together, and nothing else in the exporter.
Every command is a plain read the exporter's ACL user may run (platform_common.jobs.acl)
on one key of the type, never a job hash (payloads are personal data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.redis.replies import first_score

__all__ = ["LIMITS_READ", "TYPE_COMMAND_COUNT", "TypeReplies", "type_commands"]

LIMITS_READ = ("rate", "interval_ms", "max_running", "max_running_per_key", "fair_by")
"""The fields of the limits hash the exporter reads, in its HMGET's order."""


def type_commands(keys: QueueKeys) -> list[tuple[Any, ...]]:
    """The read-only commands for one agent type, in the order of their replies (hashes
    come flat in RESP2, as a dict in RESP3; ZRANGE WITHSCORES flat or as pairs):

    0. `ZCARD waiting`: jobs waiting to be taken that have a job hash (a retry, a
       released or requeued job, one of the previous layout); with 7, the queue depth.
       Not LLEN of the queue list: expiry is lazy, so an expired job's id stays in the
       list until a worker pops and drops it, while these two hold exactly the jobs
       that wait.
    1, 2, 3. `LLEN processing`, `ZCARD delayed`, `LLEN dead`: jobs a worker has taken,
       waiting for a retry, dead-lettered.
    4. `HGETALL stats`: the stats hash, counters and histograms (keys.py).
    5. `ZRANGE workers 0 -1 WITHSCORES`: every worker's last heartbeat (worker id, ms);
       the queue prunes silent workers, so this stays as small as the fleet.
    6. `ZRANGE waiting 0 0 WITHSCORES`: the oldest waiting job with a job hash (id,
       arrival ms), or empty: kept beside the list so that no job hash is read for it.
    7. `HLEN queued`: jobs waiting to be taken for the first time, each packed in one
       field of the `queued` hash (the values, which hold the payloads, are never read).
    8. `ZRANGE arrivals 0 0 WITHSCORES`: the oldest second (ms) in which a job still
       packed in `queued` arrived, or empty.
    9. `HGETALL worker_jobs`: each worker's jobs in progress (worker id -> count), as
       its heartbeat last wrote it; pruned with the heartbeats.
    10. `GET paused`: the moment the type was paused, or nil while it runs.
    11. `HMGET limits` LIMITS_READ: the type's rate (starts per interval_ms), caps on
        running jobs and fair share's field (queue/limits.py), each nil when not set.
    12, 13. `LLEN queue:high`, `LLEN queue:low`: the jobs waiting at priority high and
       low (queue/priority.py). These lose an expired job's id when it expires, so each
       length is its level's depth; normal's is the depth less both.
    14. `HLEN fair:since`: fair share's keys with jobs waiting (0 when absent); only a
       type with keys waiting has their waits read (fair_share.py).

    A reply may also be an error (WRONGTYPE): the reader then skips the type.
    `TypeReplies.of` unpacks them in this order; change the two together.
    """
    return [
        ("ZCARD", keys.waiting),
        ("LLEN", keys.processing),
        ("ZCARD", keys.delayed),
        ("LLEN", keys.dead),
        ("HGETALL", keys.stats),
        ("ZRANGE", keys.workers, 0, -1, "WITHSCORES"),
        ("ZRANGE", keys.waiting, 0, 0, "WITHSCORES"),
        ("HLEN", keys.queued),
        ("ZRANGE", keys.arrivals, 0, 0, "WITHSCORES"),
        ("HGETALL", keys.worker_jobs),
        ("GET", keys.paused),
        ("HMGET", keys.limits, *LIMITS_READ),
        *(("LLEN", level) for level in keys.level_queues),
        ("HLEN", keys.fair_since),
    ]


class TypeReplies(NamedTuple):
    """One type's replies to `type_commands`, by meaning (as its docstring has them)."""

    queue_depth: Any
    """Jobs waiting to be taken: replies 0 and 7 summed."""
    in_progress: Any
    delayed_depth: Any
    dead_letter_depth: Any
    stats: Any
    heartbeats: Any
    oldest_waiting: Any
    """Of replies 6 and 8, the one with the oldest arrival (ms, its score)."""
    worker_jobs: Any
    paused: bool
    """Whether the type's pause key holds a value."""
    limits: Any
    level_depths: tuple[Any, Any]
    """Replies 12 and 13: jobs waiting at priority high and low."""
    fair_keys_waiting: Any

    @classmethod
    def of(cls, replies: Sequence[Any]) -> TypeReplies:
        """`replies` to type_commands, in their order (exactly TYPE_COMMAND_COUNT).
        An error reply of either part of the depth or the oldest job stands for both."""
        (waiting, in_progress, delayed, dead, stats, heartbeats, oldest, packed, arrived,
         worker_jobs, paused, limits, high, low, fair_keys) = replies  # fmt: skip
        depth = waiting
        if isinstance(waiting, int) and not isinstance(waiting, bool):
            depth = packed if isinstance(packed, BaseException) else waiting + int(packed)
        return cls(depth, in_progress, delayed, dead, stats, heartbeats,
                   _older(oldest, arrived), worker_jobs, paused is not None,
                   limits, (high, low), fair_keys)  # fmt: skip


def _older(first: Any, second: Any) -> Any:
    """Of two ZRANGE ... 0 0 WITHSCORES replies, the one with the lower score (an error
    reply wins: it is reported; an empty one loses)."""
    for reply in (first, second):
        if isinstance(reply, BaseException):
            return reply
    a, b = _score(first), _score(second)
    if a is None:
        return second
    if b is None:
        return first
    return first if a <= b else second


def _score(reply: Any) -> float | None:
    score = first_score(reply)
    return None if score is None else float(score)


TYPE_COMMAND_COUNT = len(type_commands(QueueKeys("x")))
"""Commands (so replies) per agent type in a scrape's pipeline."""
