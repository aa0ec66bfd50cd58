"""Fair share's waiting state written by hand, the way the enqueue writes it (keys.py):
each key's job ids LPUSHed on its list `fair:q:<key>` (the oldest at the tail), the key
once on the ring `fair`, plus FAIR_SHARED_ENTRY; each job packed in `queued`
(queue/envelope.py) or, once it has one, in its job hash's `enqueued_at`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import redis

from platform_common.jobs.keys import FAIR_SHARED_ENTRY, QueueKeys
from tests.support.stored_jobs import pack_queued
from tests.support.sync_redis import sync_reply

__all__ = ["Waiting", "redis_now_ms", "seed_fair"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One id on a key's list: a job waiting `age_ms`, packed or with a job hash, or a
    stray (its job expired or was cancelled: the id alone is left)."""

    job_id: str
    age_ms: int = 0
    form: Literal["packed", "hash", "stray"] = "packed"


def redis_now_ms(client: redis.Redis) -> int:
    seconds, micros = sync_reply(client.time())
    return int(seconds) * 1000 + int(micros) // 1000


def seed_fair(
    client: redis.Redis,
    agent_type: str,
    lists: Mapping[str, Sequence[Waiting]],
    *,
    shared: bool = True,
) -> None:
    """Write `lists` (fairness key -> its ids, the oldest first) and the ring holding
    each key, then the shared entry when `shared`. Pipelined: a test seeds 10,000 keys."""
    keys = QueueKeys(agent_type)
    now_ms = redis_now_ms(client)
    pipe = client.pipeline(transaction=False)
    pipe.sadd(QueueKeys.types_key(), agent_type)
    for key, jobs in lists.items():
        for job in jobs:
            enqueued = now_ms - job.age_ms
            if job.form == "packed":
                packed = pack_queued(
                    payload=f'{{"tenant": "{key}"}}',
                    enqueued_at_ms=enqueued,
                    expires_at_ms=enqueued + 3_600_000,
                    ttl_seconds=3600,
                )
                pipe.hset(keys.queued, job.job_id, packed)
            elif job.form == "hash":
                fields = {"enqueued_at": enqueued, "state": "queued"}
                pipe.hset(keys.job(job.job_id), mapping=fields)
        if jobs:
            pipe.lpush(keys.fair_list(key), *[job.job_id for job in jobs])
        pipe.lpush(keys.fair_ring, key)
    if shared:
        pipe.lpush(keys.fair_ring, FAIR_SHARED_ENTRY)
    pipe.execute()
