"""The demo producer: a steady mix of ordinary, slow, flaky, poison and invalid jobs."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from platform_common.jobs.queue import JobQueue

MIX = (("ok", 0.70), ("slow", 0.12), ("flaky", 0.12), ("poison", 0.03), ("invalid", 0.03))
TASKS = {
    "dining": ("Find 3 dinner reservations in Tokyo, Feb 13-17, party of 2", "RestaurantOption[]"),
    "flights": ("Find a morning flight NRT -> KIX on Feb 15, one adult", "FlightOption[]"),
}


def make_job(agent_type: str, rng: random.Random) -> dict[str, Any]:
    behaviour = rng.choices([name for name, _ in MIX], [weight for _, weight in MIX])[0]
    task, result_format = TASKS[agent_type]
    return {
        "job_id": uuid.uuid4().hex,
        "session_id": uuid.uuid4().hex,
        "orchestrator_id": "orch-demo",
        "agent_type": agent_type,
        "task": task,
        "constraints": {"demo": behaviour, "max_price_per_person": 200},
        "curated_shortlist": ["sukiyabashi-jiro", "den", "kyubey"],
        "result_format": result_format,
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "ttl_seconds": 120,
    }


async def produce(
    queue: JobQueue,
    agent_types: Sequence[str],
    seconds: float,
    rate: float,
    stop: asyncio.Event,
    until: threading.Event | None = None,
) -> None:
    """Enqueue `rate` jobs/s over `agent_types`, printing a summary every 5 s, until `stop`,
    `seconds` pass (0: never) or `until` is set (from another thread)."""
    rng = random.Random(7)
    started = time.monotonic()
    next_summary = started + 5
    while not stop.is_set() and (seconds <= 0 or time.monotonic() - started < seconds):
        if until is not None and until.is_set():
            break
        for agent_type in agent_types:
            await queue.enqueue(make_job(agent_type, rng))
        if time.monotonic() >= next_summary:
            next_summary += 5
            await print_summary(queue, agent_types)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=len(agent_types) / rate)
    print("\nfinal:")
    await print_summary(queue, agent_types)


async def print_summary(queue: JobQueue, agent_types: Sequence[str]) -> None:
    for agent_type in agent_types:
        s = await queue.stats(agent_type)
        c = s.counters
        print(
            f"  {agent_type:8} queued={s.queued:<4} running={s.in_progress:<3} "
            f"retrying={s.delayed:<3} dead={s.dead:<3} enqueued={c['enqueued']:<5} "
            f"completed={c['completed']:<5} retried={c['retried']:<4} failed={c['failed']}",
            flush=True,
        )
