"""Jobs written as the previous release wrote them: its enqueue script
(tests/support/legacy/queue_enqueue_v2.lua, every packed job with an expiry bucket entry
and a five-field header, no deadline mark), with its keys and arguments."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from platform_common.jobs.redis.url import RedisClient
from tests.support.queue_handlers import make_job

__all__ = ["due_in", "previous_enqueue"]

PREVIOUS_ENQUEUE = (Path(__file__).parent / "legacy" / "queue_enqueue_v2.lua").read_text()


async def previous_enqueue(client: RedisClient, keys: QueueKeys, job: dict[str, Any]) -> None:
    """Enqueue `job` as the previous release did. Unlike this release's producer it
    takes a job already past its deadline (no validation here)."""
    created_ms = int(datetime.fromisoformat(job["created_at"]).timestamp() * 1000)
    job_id = job["job_id"]
    expires_at = created_ms + job["ttl_seconds"] * 1000
    script_keys = [keys.queue, keys.stats, keys.queued, keys.expiring, keys.arrivals]
    script_keys += [keys.arrived, keys.job(job_id), keys.result(job_id)]
    script_keys.append(keys.expiring_bucket(expires_at))
    args: list[Any] = [f"previous:{job_id}", 1, created_ms, 300_000, EXPIRY_BUCKET_MS]
    args += [ARRIVAL_BUCKET_MS, job_id, json.dumps(job), job["ttl_seconds"], created_ms, 3, ""]
    reply = await client.eval(PREVIOUS_ENQUEUE, len(script_keys), *script_keys, *args)
    assert [_text(part) for part in reply] == ["ok", "1"], reply


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def due_in(seconds: float, ttl_seconds: int = 60, **overrides: Any) -> dict[str, Any]:
    """A job whose deadline lies `seconds` from now (negative: already past)."""
    created = datetime.now(UTC) - timedelta(seconds=ttl_seconds - seconds)
    return make_job(created_at=created.isoformat(), ttl_seconds=ttl_seconds, **overrides)
