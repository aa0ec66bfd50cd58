"""Queue data for the exporter tests, written by hand in the queue's key layout, and the
samples of a /metrics page read back by name and labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families

from platform_common.jobs.keys import QueueKeys
from tests.support.sync_redis import sync_reply

__all__ = ["Samples", "of", "parse", "seed_type"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def seed_type(
    client: redis.Redis,
    agent_type: str,
    *,
    waiting: int = 0,
    processing: int = 0,
    delayed: int = 0,
    dead: int = 0,
    stats: Mapping[str, Any] | None = None,
    oldest_age_ms: int | None = None,
    heartbeats_age_ms: Mapping[str, int] | None = None,
) -> None:
    """Write one agent type's keys the way the queue does (ids only in the lists)."""
    keys = QueueKeys(agent_type)
    now_ms = _redis_now_ms(client)
    client.sadd(QueueKeys.types_key(), agent_type)
    if waiting:
        ids = [f"{agent_type}-w{i}" for i in range(waiting)]
        client.lpush(keys.queue, *ids)
        age = oldest_age_ms if oldest_age_ms is not None else 0
        # The queue's waiting set: every waiting id with its arrival, the oldest first.
        client.zadd(keys.waiting, {job_id: now_ms - age + i for i, job_id in enumerate(ids)})
    if processing:
        client.lpush(keys.processing, *[f"{agent_type}-p{i}" for i in range(processing)])
    if delayed:
        client.zadd(keys.delayed, {f"{agent_type}-d{i}": now_ms + i for i in range(delayed)})
    if dead:
        client.lpush(keys.dead, *[f"{agent_type}-x{i}" for i in range(dead)])
    if stats:
        client.hset(keys.stats, mapping=dict(stats))
    for worker, age in (heartbeats_age_ms or {}).items():
        client.zadd(keys.workers, {worker: now_ms - age})


def _redis_now_ms(client: redis.Redis) -> int:
    seconds, micros = sync_reply(client.time())
    return int(seconds) * 1000 + int(micros) // 1000


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def of(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
