"""The demo producer: a steady mix of ordinary, slow, flaky and poison jobs, and a failing
phase: for a while every job of one agent type fails (its upstream is down)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from platform_common.jobs.queue import JobQueue

MIX = (("ok", 0.73), ("slow", 0.12), ("flaky", 0.12), ("poison", 0.03))
"""dining's jobs: 3% are dead-lettered on purpose (its demo objective allows 5%)."""
HEALTHY_MIX = (("ok", 0.76), ("slow", 0.12), ("flaky", 0.12))
"""flights' jobs outside the failing phase: flaky ones fail once and then succeed."""
OUTAGE_TYPE = "flights"
TASKS = {
    "dining": ("Find 3 dinner reservations in Tokyo, Feb 13-17, party of 2", "RestaurantOption[]"),
    "flights": ("Find a morning flight NRT -> KIX on Feb 15, one adult", "FlightOption[]"),
}


MIXES = {"dining": MIX, OUTAGE_TYPE: HEALTHY_MIX}


@dataclass(frozen=True, slots=True)
class Outage:
    """The failing phase: from `start` seconds into the traffic, for `seconds`, every job
    of `agent_type` fails at once (its handler's upstream is down)."""

    start: float
    seconds: float
    agent_type: str = OUTAGE_TYPE

    def on(self, elapsed: float) -> bool:
        return self.start <= elapsed < self.start + self.seconds


def make_job(agent_type: str, rng: random.Random, failing: bool = False) -> dict[str, Any]:
    mix = MIXES[agent_type]
    behaviour = rng.choices([name for name, _ in mix], [weight for _, weight in mix])[0]
    if failing:
        behaviour = "outage"
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
    outage: Outage | None = None,
) -> None:
    """Enqueue `rate` jobs/s over `agent_types`, printing a summary every 5 s, until `stop`,
    `seconds` pass (0: never) or `until` is set (from another thread); during `outage`
    every job of its agent type fails."""
    rng = random.Random(7)
    started = time.monotonic()
    next_summary = started + 5
    failing = False
    while not stop.is_set() and (seconds <= 0 or time.monotonic() - started < seconds):
        if until is not None and until.is_set():
            break
        now_failing = outage is not None and outage.on(time.monotonic() - started)
        if outage is not None and now_failing != failing:
            failing = now_failing
            print(_outage_line(outage, failing), flush=True)
        for agent_type in agent_types:
            down = failing and outage is not None and agent_type == outage.agent_type
            await queue.enqueue(make_job(agent_type, rng, down))
        if time.monotonic() >= next_summary:
            next_summary += 5
            await print_summary(queue, agent_types)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=len(agent_types) / rate)
    print("\nfinal:")
    await print_summary(queue, agent_types)


def _outage_line(outage: Outage, failing: bool) -> str:
    if failing:
        return (
            f"FAILING PHASE: the {outage.agent_type} upstream is down; every "
            f"{outage.agent_type} job fails for {outage.seconds:g}s"
        )
    return f"FAILING PHASE OVER: the {outage.agent_type} upstream is back"


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
