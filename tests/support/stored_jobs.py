"""A job's stored fields whichever form it is kept in: packed in the `queued` hash while
it waits unclaimed (platform_common/jobs/queue/envelope.py), or its own job hash."""

from __future__ import annotations

from typing import Any

from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from platform_common.jobs.queue.envelope import unpack_queued

__all__ = [
    "DEADLINE_MARK_AHEAD_MS",
    "hold_deadline_mark",
    "make_packed_due",
    "pack_queued",
    "stored_fields",
    "stored_fields_sync",
    "to_job_hash",
]


def _fields(hashed: dict[str, str], packed: str | None) -> dict[str, str]:
    if hashed or packed is None:
        return hashed
    return unpack_queued(packed).record_fields()


async def stored_fields(client: Any, keys: QueueKeys, job_id: str) -> dict[str, str]:
    """The job hash's fields, or those of the packed job ({} if neither exists).
    `client` is an asyncio redis-py client with decode_responses=True."""
    hashed = await client.hgetall(keys.job(job_id))
    packed = await client.hget(keys.queued, job_id)
    return _fields(hashed, packed)


def stored_fields_sync(client: Any, keys: QueueKeys, job_id: str) -> dict[str, str]:
    """stored_fields with a synchronous client."""
    return _fields(client.hgetall(keys.job(job_id)), client.hget(keys.queued, job_id))


def pack_queued(
    *,
    payload: str,
    enqueued_at_ms: int,
    expires_at_ms: int,
    ttl_seconds: int,
    max_attempts: int = 3,
    nonce: str = "test:0",
    trace_context: str = "",
    ordered: bool = False,
) -> str:
    """A packed value as lua/queue_enqueue.lua writes it: for tests that plant one.
    `ordered`: written in deadline order (",o" ends its header)."""
    header = f"{enqueued_at_ms},{expires_at_ms},{ttl_seconds},{max_attempts},{nonce}"
    if ordered:
        header += ",o"
    return f"{header}\n{trace_context}\n{payload}"


async def to_job_hash(client: Any, keys: QueueKeys, job_id: str) -> dict[str, str]:
    """Turn a job packed in `queued` into the form a waiting job keeps once it has a job
    hash (a requeued or released job, or one enqueued by the previous layout): the job
    hash as the previous enqueue wrote it (no `state` field), its `waiting` and `expiry`
    entries, its queued field and arrival count gone. Its expiry bucket entry stays, as a
    claim leaves it. For tests of the scripts that read that form (queue_expire.lua).
    Returns the fields written. `client`: asyncio, decode_responses=True."""
    packed = await client.hget(keys.queued, job_id)
    if packed is None:
        raise LookupError(f"{job_id} is not packed in {keys.queued}")
    job = unpack_queued(packed)
    fields = job.record_fields()
    del fields["state"]
    second = job.enqueued_at_ms - job.enqueued_at_ms % ARRIVAL_BUCKET_MS
    await client.hset(keys.job(job_id), mapping=fields)
    await client.zadd(keys.waiting, {job_id: job.enqueued_at_ms})
    await client.zadd(keys.expiry, {job_id: job.expires_at_ms})
    await client.hdel(keys.queued, job_id)
    if await client.hincrby(keys.arrived, str(second), -1) <= 0:
        await client.hdel(keys.arrived, str(second))
        await client.zrem(keys.arrivals, str(second))
    return fields


async def make_packed_due(
    client: Any, keys: QueueKeys, job_ids: list[str], *, deadline_ms: int | None = None
) -> int:
    """Move the TTL deadline of jobs packed in `queued` into Redis' past, so far that its
    whole expiry bucket is past: the packed value and the bucket alike, as enqueue would
    have written them for a job enqueued that long ago (validation refuses a created_at
    whose deadline is already past). The cleanup expires them on its next run, a claim
    on the spot. `deadline_ms` sets another deadline instead. A job written in deadline
    order keeps its ",o" and gets a bucket entry all the same, so the bucket's expiry
    finds it wherever it waits on the list (the tail walk finds it only at the tail).
    Returns the new deadline (ms). `client`: asyncio, decode_responses=True."""
    if deadline_ms is None:
        seconds, micros = await client.time()
        deadline_ms = int(seconds) * 1000 + int(micros) // 1000 - EXPIRY_BUCKET_MS - 1000
    past = deadline_ms
    bucket = keys.expiring_bucket(past)
    for job_id in job_ids:
        packed = await client.hget(keys.queued, job_id)
        if packed is None:
            raise LookupError(f"{job_id} is not packed in {keys.queued}")
        header, rest = packed.split("\n", 1)
        enqueued_at, expires_at, ttl, max_attempts, nonce = header.split(",", 4)
        await client.hset(
            keys.queued, job_id, f"{enqueued_at},{past},{ttl},{max_attempts},{nonce}\n{rest}"
        )
        old_bucket = keys.expiring_bucket(int(expires_at))
        await client.lrem(old_bucket, 1, job_id)
        if not await client.exists(old_bucket):
            await client.zrem(keys.expiring, old_bucket.rsplit(":", 1)[1])
        await client.rpush(bucket, job_id)
        start = int(bucket.rsplit(":", 1)[1])
        await client.zadd(keys.expiring, {str(start): start})
    return past


DEADLINE_MARK_AHEAD_MS = 86_400_000
"""How far ahead hold_deadline_mark puts the mark by default: a day, beyond any TTL a
test enqueues with, so every job is out of deadline order."""


async def hold_deadline_mark(
    client: Any, keys: QueueKeys, *, ahead_ms: int = DEADLINE_MARK_AHEAD_MS
) -> int:
    """Set `keys.deadline_mark` `ahead_ms` past Redis' now (rounded up to a bucket
    boundary, with the expiry the enqueue gives it), as if jobs with that long a TTL
    waited ahead: every job enqueued next with a shorter TTL is out of deadline order,
    so it gets its expiry bucket entry (lua/queue_enqueue.lua). For tests of the bucket
    path. Returns the mark. `client`: asyncio, decode_responses=True."""
    seconds, micros = await client.time()
    ahead = int(seconds) * 1000 + int(micros) // 1000 + ahead_ms
    mark = ahead - ahead % EXPIRY_BUCKET_MS + EXPIRY_BUCKET_MS
    await client.set(keys.deadline_mark, str(mark), pxat=mark + EXPIRY_BUCKET_MS)
    return mark
