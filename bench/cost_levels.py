"""Drain cost with priority levels (`python -m bench.cost --levels`): Redis CPU per
drained job when the jobs wait on three levels (high, normal, low, a third each,
interleaved) against the same jobs on one level (normal), side by side in alternated
rounds (one level first in even rounds), one worker process with the no-op handler, the
same jobs every round. Printed: the median of each side, the ratio of the medians (the
target: three levels within 1.1x of one) and each round's own ratio."""

from __future__ import annotations

import asyncio
import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from bench.cost_probes import RedisProbe, drain_with_worker
from platform_common.jobs.queue import JobQueue, QueueSettings

__all__ = ["LEVELS_TARGET", "LevelsCost", "measure_levels", "render_levels"]

LEVELS_TARGET = 1.1
"""Three levels' drain cost (Redis CPU per job) at most this many times one level's."""

_THREE = ("high", "normal", "low")


@dataclass(frozen=True, slots=True)
class LevelsCost:
    """Redis CPU seconds per drained job and jobs/s, per round, of each side."""

    n: int
    one: list[tuple[float, float]]
    three: list[tuple[float, float]]

    def ratio(self) -> float:
        return statistics.median(c for c, _ in self.three) / statistics.median(
            c for c, _ in self.one
        )


async def _enqueue(url: str, jobs: list[dict[str, Any]], levels: bool) -> None:
    queue = await JobQueue.connect(QueueSettings.from_url(url))
    try:
        priority = [level for level, _ in zip(itertools.cycle(_THREE), jobs)] if levels else None
        await queue.enqueue_many(jobs, priority=priority)
    finally:
        await queue.aclose()


def measure_levels(
    probe: RedisProbe,
    jobs: list[dict[str, Any]],
    *,
    agent_type: str,
    handler: str,
    concurrency: int,
    rounds: int,
    progress: Any = print,
) -> LevelsCost:
    """`rounds` alternated pairs of drains of `jobs`, on one level and on three."""
    cost = LevelsCost(len(jobs), [], [])
    for index in range(rounds):
        order = (False, True) if index % 2 == 0 else (True, False)
        for levels in order:
            progress(
                f"drain, {len(jobs):,} jobs on {'three levels' if levels else 'one level'}, "
                f"round {index + 1}/{rounds}"
            )
            probe.flush()
            asyncio.run(_enqueue(probe.url, jobs, levels))
            drain = drain_with_worker(
                probe, len(jobs), agent_type=agent_type, handler=handler,
                counter="completed", concurrency=concurrency,
            )  # fmt: skip
            reading = (drain.redis_cpu / len(jobs), len(jobs) / drain.seconds)
            (cost.three if levels else cost.one).append(reading)
    probe.flush()
    return cost


def render_levels(cost: LevelsCost) -> str:
    def side(readings: list[tuple[float, float]]) -> str:
        cpu = [c * 1e6 for c, _ in readings]
        rate = [r for _, r in readings]
        return (
            f"{statistics.median(cpu):6.1f} us/job (min-max {min(cpu):.1f}-{max(cpu):.1f}), "
            f"{statistics.median(rate):,.0f} jobs/s"
        )

    own = [t[0] / o[0] for o, t in zip(cost.one, cost.three, strict=True)]
    ratio = cost.ratio()
    verdict = "met" if ratio <= LEVELS_TARGET else "MISSED"
    return "\n".join(
        [
            f"Drain of {cost.n:,} jobs by one worker, Redis CPU per job (median of "
            f"{len(cost.one)} alternated rounds):",
            f"  one level (normal)           {side(cost.one)}",
            f"  three levels (1/3 each)      {side(cost.three)}",
            f"  three / one: {ratio:.2f}x (target <= {LEVELS_TARGET}x: {verdict}); "
            f"each round's own: {', '.join(f'{r:.2f}' for r in own)}",
        ]
    )
