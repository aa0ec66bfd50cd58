"""Expire jobs past their TTL (lua/queue_expire.lua): the cost grows with the jobs
expired, never with the backlog queued behind them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from ..keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from ..redis.script import Script

__all__ = ["CORRUPT_RESULT_TTL_SECONDS", "ExpireReport", "expire_jobs", "expire_queued"]

CORRUPT_RESULT_TTL_SECONDS = 86_400
"""How long the "expired" result of a job whose stored ttl does not parse is kept."""

RunScript = Callable[[Script, list[str], list[Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ExpireReport:
    """What one expiry call did."""

    expired: tuple[str, ...] = ()
    """The jobs this call expired (each one counted, its result stored, published)."""
    corrupt: tuple[tuple[str, str], ...] = ()
    """(job_id, problem) of the expired jobs whose stored record did not parse: expired
    all the same (the problem is in their result), so one such record cannot stall
    every later cleanup run."""


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
        keys.expiry,
        keys.delayed,
        keys.processing,
        keys.leases,
        keys.stats,
        keys.waiting,
    ]
    for job_id in job_ids:
        script_keys += [keys.job(job_id), keys.result(job_id)]
    args: list[Any] = [keys.channel, CORRUPT_RESULT_TTL_SECONDS, *job_ids]
    expired, *corrupt = await run_script(script, script_keys, args)
    return ExpireReport(
        expired=tuple(str(job_id) for job_id in expired),
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
    read: Callable[[Sequence[Sequence[Any]]], Awaitable[list[Any]]],
    refusal: Callable[[ResponseError, list[str]], Awaitable[BaseException]],
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
    looked = 0
    while looked < limit:
        (due,) = await read(
            [("ZRANGEBYSCORE", keys.expiring, "-inf", now_ms - EXPIRY_BUCKET_MS, "LIMIT", 0, 16)]
        )
        if isinstance(due, ResponseError):
            raise await refusal(due, [keys.expiring])
        if isinstance(due, Exception):
            raise due
        if not due:
            break
        progressed = False
        for start in due:
            bucket = f"{keys.expiring}:{int(start)}"
            (ids,) = await read([("LRANGE", bucket, 0, BUCKET_CHUNK - 1)])
            if isinstance(ids, ResponseError):
                raise await refusal(ids, [bucket])
            if isinstance(ids, Exception):
                raise ids
            script_keys = [
                keys.expiring, bucket, keys.queued, keys.stats, keys.arrivals, keys.arrived,
                *(keys.result(job_id) for job_id in ids),
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
            done, *problems = reply
            expired += [str(job_id) for job_id in done]
            corrupt += [(str(job_id), str(problem)) for job_id, problem in problems]
            if looked >= limit:
                break
        if not progressed:
            break
    return ExpireReport(expired=tuple(expired), corrupt=tuple(corrupt))
