"""Expire jobs past their TTL: those with a job hash (lua/queue_expire.lua), those packed
in `queued` by their expiry bucket (lua/queue_expire_queued.lua) or, written in deadline
order with no bucket, from the queue list's tail (lua/queue_expire_tail.lua). The cost
grows with the jobs expired (and the entries passed over, bounded per run), never with
the backlog queued behind them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from ..keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from ..redis.script import Script
from .connection import QueueConnection

__all__ = [
    "CORRUPT_RESULT_TTL_SECONDS",
    "ExpireReport",
    "expire_due",
    "expire_in_order",
    "expire_jobs",
    "expire_queued",
    "redis_time_ms",
]

log = logging.getLogger("platform_common.jobs.queue.expiry")

CORRUPT_RESULT_TTL_SECONDS = 86_400
"""How long the "expired" result of a job whose stored ttl does not parse is kept."""

RunScript = Callable[[Script, list[str], list[Any]], Awaitable[Any]]
Read = Callable[[Sequence[Sequence[Any]]], Awaitable[list[Any]]]
Refusal = Callable[[ResponseError, list[str]], Awaitable[BaseException]]


@dataclass(frozen=True, slots=True)
class ExpireReport:
    """What one expiry call did."""

    expired: tuple[str, ...] = ()
    """The jobs this call expired (each one counted, its result stored, published)."""
    corrupt: tuple[tuple[str, str], ...] = ()
    """(job_id, problem) of the expired jobs whose stored record did not parse: expired
    all the same (the problem is in their result), so one such record cannot stall
    every later cleanup run."""
    traces: tuple[str, ...] = ()
    """The creation context (tracing.TRACE_CONTEXT_FIELD) each job of `expired` carried,
    in the same order, "" where none: the log line about its expiry carries its ids."""

    def __add__(self, other: ExpireReport) -> ExpireReport:
        return ExpireReport(
            self.expired + other.expired, self.corrupt + other.corrupt, self.traces + other.traces
        )


async def expire_jobs(
    run_script: RunScript, script: Script, keys: QueueKeys, job_ids: Sequence[str]
) -> ExpireReport:
    """Expire those of `job_ids` whose TTL has passed (by Redis TIME).

    CorruptQueueState (naming the key, raised by `run_script` from the script's CORRUPT
    reply) if a queue key holds another type or the `expired` counter is not an
    integer; nothing is written then."""
    if not job_ids:
        return ExpireReport()
    script_keys = [
        keys.expiry, keys.delayed, keys.processing, keys.leases, keys.stats, keys.waiting,
    ]  # fmt: skip
    for job_id in job_ids:
        script_keys += [keys.job(job_id), keys.result(job_id)]
    # Levels: a waiting high or low job leaves its list; an expired job's cancel request goes.
    script_keys += [*keys.level_queues, keys.cancels]
    args: list[Any] = [keys.channel, CORRUPT_RESULT_TTL_SECONDS, *job_ids]
    expired, traces, *corrupt = await run_script(script, script_keys, args)
    return ExpireReport(
        expired=tuple(str(job_id) for job_id in expired),
        traces=_texts(traces),
        corrupt=tuple((str(job_id), str(problem)) for job_id, problem in corrupt),
    )


BUCKET_CHUNK = 1_000
"""Bucket entries looked at per script call: one call holds Redis for about a
millisecond, whatever the bucket's length."""

MAX_BUCKET_ENTRIES_PER_RUN = 100_000
"""Bucket entries one cleanup run looks at, at most. Most entries are of jobs claimed
long ago (a claim does not take its id out of the bucket: that would cost an LREM),
each skipped for well under a microsecond, so one run keeps up with a drain rate of
this many jobs per cleanup interval per worker."""


async def expire_queued(
    run_script: RunScript,
    read: Read,
    refusal: Refusal,
    script: Script,
    keys: QueueKeys,
    now_ms: int,
    *,
    limit: int = MAX_BUCKET_ENTRIES_PER_RUN,
) -> ExpireReport:
    """Expire the never-claimed jobs of every expiry bucket wholly past at `now_ms`
    (lua/queue_expire_queued.lua), looking at up to `limit` bucket entries.

    `read` runs plain commands in one round trip (QueueConnection.execute_many),
    `refusal` turns an error reply into the package's error (QueueConnection.refusal).
    CorruptQueueState (naming the key) if a key holds another type or a counter is not
    an integer; nothing of that call is written then."""
    expired: list[str] = []
    corrupt: list[tuple[str, str]] = []
    traces: list[str] = []
    looked = 0
    while looked < limit:
        due = await _read_one(
            read, refusal, keys.expiring, "ZRANGEBYSCORE", "-inf", now_ms - EXPIRY_BUCKET_MS,
            "LIMIT", 0, 16,
        )  # fmt: skip
        if not due:
            break
        progressed = False
        for start in due:
            bucket = f"{keys.expiring}:{int(start)}"
            ids = await _read_one(read, refusal, bucket, "LRANGE", 0, BUCKET_CHUNK - 1)
            script_keys = [
                keys.expiring, bucket, keys.queued, keys.stats, keys.arrivals, keys.arrived,
                *(keys.result(job_id) for job_id in ids), *keys.level_queues,
            ]  # fmt: skip
            args: list[Any] = [
                keys.channel, int(start), EXPIRY_BUCKET_MS, ARRIVAL_BUCKET_MS,
                CORRUPT_RESULT_TTL_SECONDS, *ids,
            ]  # fmt: skip
            reply = await run_script(script, script_keys, args)
            if reply and reply[0] in ("later", "moved"):
                continue
            progressed = True
            looked += len(ids)
            done, carried, *problems = reply
            expired += [str(job_id) for job_id in done]
            traces += _texts(carried)
            corrupt += [(str(job_id), str(problem)) for job_id, problem in problems]
            if looked >= limit:
                break
        if not progressed:
            break
    return ExpireReport(expired=tuple(expired), corrupt=tuple(corrupt), traces=tuple(traces))


FIRST_TAIL_WINDOW = 16
"""Entries the tail scan reads first; later windows double, up to BUCKET_CHUNK."""


async def expire_in_order(
    run_script: RunScript,
    read: Read,
    refusal: Refusal,
    script: Script,
    keys: QueueKeys,
    *,
    limit: int = MAX_BUCKET_ENTRIES_PER_RUN,
    window: int = BUCKET_CHUNK,
) -> ExpireReport:
    """Expire the jobs packed in `queued` that wait past their deadline (by Redis TIME),
    walking the queue list from its tail (lua/queue_expire_tail.lua), `window` entries
    per script call, up to `limit` entries per run.

    What it guarantees: a job written "in order" (lua/queue_enqueue.lua: no expiry
    bucket) that waits past its deadline is expired at most EXPIRY_BUCKET_MS plus one
    cleanup interval late, as long as every job tail-ward of it on the list is ordered,
    expired or a stale entry. The walk stops at the first ordered job not yet due: the
    ordered jobs behind it are due no earlier, within EXPIRY_BUCKET_MS. Kept entries (a
    job that waits with a job hash, which queue_expire.lua expires; an unordered job,
    which its bucket expires; a value that does not parse, which the claim deals with)
    are passed over, up to `limit` entries per run; expired and stale entries at the
    list's very tail are trimmed off it. The run also ends when a worker takes from the
    tail meanwhile (the window moved): a busy worker expires due jobs at claim anyway.

    `read` and `refusal` as for expire_queued. CorruptQueueState (naming the key) if a
    key holds another type or a count is not an integer; nothing of that call is
    written then."""
    expired: list[str] = []
    traces: list[str] = []
    offset = looked = 0
    # The usual run finds a job not yet due at the very tail: a few ids tell, so the
    # first window is small and each next one doubles (a run passing many entries
    # still reads `window` ids per call).
    size = min(FIRST_TAIL_WINDOW, window)
    while looked < limit:
        wanted = min(size, limit - looked)
        size = min(size * 2, window)
        tail = (-(offset + wanted), -(offset + 1))
        ids = await _read_one(read, refusal, keys.queue, "LRANGE", *tail)
        if not ids:
            break
        # No result TTL for a value that does not parse: the walk keeps such a job.
        args = [keys.channel, offset, ARRIVAL_BUCKET_MS, *ids]
        reply = await run_script(script, _tail_keys(keys, ids), args)
        if reply and reply[0] == "moved":
            break
        done, trimmed, stopped, carried = reply
        expired += [str(job_id) for job_id in done]
        traces += _texts(carried)
        looked += len(ids)
        if int(stopped) or len(ids) < wanted:
            break  # an ordered job not yet due, or the list's head reached
        # Trimmed entries left the tail: the entries not trimmed are skipped next time.
        offset += len(ids) - int(trimmed)
    return ExpireReport(expired=tuple(expired), traces=tuple(traces))


async def _read_one(read: Read, refusal: Refusal, key: str, command: str, *args: Any) -> Any:
    """The reply of `command` on `key`, alone in its round trip; an error reply raised
    (WRONGTYPE as the package's refusal naming `key`)."""
    (reply,) = await read([(command, key, *args)])
    if isinstance(reply, ResponseError):
        raise await refusal(reply, [key])
    if isinstance(reply, Exception):
        raise reply
    return reply


def _texts(values: Sequence[Any]) -> tuple[str, ...]:
    """Reply strings as str (a client without decode_responses answers bytes)."""
    return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in values)


def _tail_keys(keys: QueueKeys, ids: Sequence[str]) -> list[str]:
    script_keys = [
        keys.queue, keys.queued, keys.waiting, keys.stats, keys.arrivals, keys.arrived,
    ]  # fmt: skip
    for job_id in ids:
        script_keys += [keys.job(job_id), keys.result(job_id)]
    return script_keys


async def expire_due(
    connection: QueueConnection,
    keys: QueueKeys,
    limit: int | None = None,
    *,
    now_ms: int | None = None,
    on_expired: Callable[[ExpireReport], None] | None = None,
) -> ExpireReport:
    """Expire up to `limit` (default cleanup_batch) unfinished jobs past their TTL,
    and say which, with the trace context each carried (for its log line). The run
    has three steps, each atomic per script call: claimed jobs, waiting jobs by
    their expiry bucket, waiting jobs in deadline order from the queue list's tail.
    `on_expired` hears each step's report as soon as it is done, so what an earlier
    step expired is told even when a later one raises (CorruptQueueState).

    Candidates are picked by Redis's clock: `now_ms` if the caller knows it (a worker
    estimates it from Redis TIME it saw), else one TIME call; this machine's clock
    is never used (the script decides with Redis TIME anyway). Stale results need no
    sweep: every result and finished record is written with its TTL, so Redis drops
    it; dead and failed jobs get theirs too (dead_letter_retention), see prune_kept."""
    batch = limit or connection.settings.cleanup_batch
    if now_ms is None:
        now_ms = await redis_time_ms(connection)
    try:
        due = await connection.client.zrangebyscore(keys.expiry, "-inf", now_ms, start=0, num=batch)
    except ResponseError as exc:
        # WRONGTYPE: CorruptQueueState worded as queue_expire.lua's refusal.
        raise await connection.refusal(exc, [keys.expiry]) from exc
    done = ExpireReport()

    def told(step: ExpireReport) -> None:
        nonlocal done
        done += step
        for job_id, problem in step.corrupt:
            log.warning(
                "expired job=%s whose stored record does not parse: %s", job_id, problem,
                extra={
                    "job_id": job_id, "agent_type": keys.agent_type, "problem": problem,
                },
            )  # fmt: skip
        if on_expired is not None and step.expired:
            on_expired(step)

    run, read, refusal = connection.run_script, connection.execute_many, connection.refusal
    scripts = connection.scripts
    told(await expire_jobs(run, scripts.expire, keys, due))
    told(await expire_queued(run, read, refusal, scripts.expire_queued, keys, now_ms))
    # The jobs written in deadline order have no expiry bucket: found from the tail.
    told(await expire_in_order(run, read, refusal, scripts.expire_tail, keys))
    return done


async def redis_time_ms(connection: QueueConnection) -> int:
    """Redis TIME in ms (one round trip)."""
    seconds, micros = await connection.client.time()
    return int(seconds) * 1000 + int(micros) // 1000
