"""Demo agent handlers: realistic timings and failures chosen by the job's constraints."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from platform_common.jobs.queue import JobPayload, NonRetryableError, current_job


async def research(job: JobPayload) -> dict[str, Any]:
    """Pretends to research `job.task`. `constraints["demo"]` picks the behaviour:
    "ok" (fast), "slow" (seconds), "flaky" (fails its first attempt, then succeeds),
    "poison" (fails every attempt: dead-lettered), "outage" (the failing phase: its
    upstream is down, it fails at once, no retry)."""
    behaviour = job.constraints.get("demo", "ok")
    if behaviour == "outage":
        raise NonRetryableError(f"upstream {job.agent_type} API is down (demo failing phase)")
    if behaviour == "poison":
        raise RuntimeError("upstream booking API rejected the request (demo poison pill)")
    if behaviour == "flaky" and current_job().attempt == 1:
        raise TimeoutError("upstream timed out (demo flaky job, will retry)")
    delay = random.uniform(1.0, 3.0) if behaviour == "slow" else random.uniform(0.02, 0.3)
    await asyncio.sleep(delay)
    options = [f"{name}-option" for name in job.curated_shortlist[:3]]
    return {"options": options, "took_seconds": round(delay, 3)}
