"""Fair share's waiting state as the queue writes it: jobs enqueued by the real JobQueue
on a type whose limits set fair_by (each job with the field on its key's list, the key
on the ring and in the ring's since hash, keys.py), then each key's time in the since
hash planted, so that a test chooses how long each key has gone without a start."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from tests.support.queue_handlers import make_job
from tests.support.sync_redis import sync_reply

__all__ = ["enqueue_keyed", "plant_waits", "redis_now_ms"]


def redis_now_ms(client: redis.Redis) -> int:
    seconds, micros = sync_reply(client.time())
    return int(seconds) * 1000 + int(micros) // 1000


async def enqueue_keyed(
    queue: JobQueue, agent_type: str, jobs_per_key: Mapping[str, int], *, by: str = "tenant"
) -> dict[str, list[str]]:
    """Enqueue `jobs_per_key` (fairness key -> jobs) of `agent_type`, whose limits must
    already set fair_by=`by`, in one enqueue_many -> key -> its job ids. The jobs live an
    hour (no expiry while a test looks)."""
    order = [key for key, count in jobs_per_key.items() for _ in range(count)]
    jobs = [make_job(agent_type, **{by: key}, ttl_seconds=3600) for key in order]
    ids = await queue.enqueue_many(jobs) if jobs else []
    by_key: dict[str, list[str]] = {key: [] for key in jobs_per_key}
    for key, job_id in zip(order, ids, strict=True):
        by_key[key].append(job_id)
    return by_key


def plant_waits(client: redis.Redis, agent_type: str, waits_ms: Mapping[str, int]) -> int:
    """Set each key's since time to Redis' now less its wait (ms) -> that now (ms).
    Pipelined: a test plants 10,000 keys."""
    since = QueueKeys(agent_type).fair_since
    now_ms = redis_now_ms(client)
    pipe = client.pipeline(transaction=False)
    items = list(waits_ms.items())
    for start in range(0, len(items), 1_000):
        pipe.hset(since, mapping={key: now_ms - wait for key, wait in items[start : start + 1_000]})
    pipe.execute()
    return now_ms
