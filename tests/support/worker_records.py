"""What worker processes leave in Redis, read with a synchronous client: the handler
run log (tests.support.queue_handlers.RUNS_KEY), results, history and counters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.redis.url import RedisSettings
from tests.support.queue_handlers import RUNS_KEY
from tests.support.sync_redis import sync_reply

__all__ = ["SyncClient", "counters", "job_history", "result", "runs", "sync_client"]

DINING = QueueKeys("dining")
SyncClient = redis.Redis | redis.RedisCluster


def sync_client(redis_url: str) -> Iterator[SyncClient]:
    """A synchronous raw client of `redis_url` (a cluster client on the cluster), closed
    at the end: the body of tests/queue's `client` fixture."""
    settings = RedisSettings.from_url(redis_url)
    client: SyncClient
    if settings.cluster:
        host, port = settings.all_addresses()[0]
        client = redis.RedisCluster(host=host, port=port, decode_responses=True)
    else:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def run_log(client: SyncClient) -> list[tuple[str, int, int, str]]:
    """(job_id, pid, attempt, event) of every run log entry, in order; an entry a client
    pushed twice (a retried RPUSH) counted once (queue_handlers.run_line)."""
    lines = dict.fromkeys(sync_reply(client.lrange(RUNS_KEY, 0, -1)))
    entries = [line.split() for line in lines]
    return [(job_id, int(pid), int(attempt), event) for job_id, pid, attempt, event, _ in entries]


def runs(client: SyncClient, job_id: str, event: str = "start") -> list[tuple[int, int]]:
    """(pid, attempt) of every recorded `event` of the job, in order."""
    return [
        (pid, attempt) for jid, pid, attempt, ev in run_log(client) if (jid, ev) == (job_id, event)
    ]


def result(client: SyncClient, job_id: str) -> dict[str, Any] | None:
    text = sync_reply(client.get(DINING.result(job_id)))
    return json.loads(text) if text else None


def job_history(client: SyncClient, job_id: str) -> list[dict[str, Any]]:
    return list(json.loads(sync_reply(client.hget(DINING.job(job_id), "history")) or "[]"))


def counters(client: SyncClient) -> dict[str, int]:
    return {k: int(float(v)) for k, v in sync_reply(client.hgetall(DINING.stats)).items()}
