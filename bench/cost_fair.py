"""Cost of fair share (`python -m bench.cost --fair`): Redis CPU per drained job and memory
per queued job with fair share on (`fair_by` tenant) at 1 and at 1,000 active keys (the
jobs' tenants round robin over the keys), against plain FIFO (no limits set: `fair_by`
none), the same jobs (their tenant field present on every side) and one worker process
with the no-op handler.

1. Drain: alternated rounds, the three sides in a rotated order (FIFO first in round 1,
   fair at 1 key first in round 2, ...), FLUSHALL and one enqueue_many before each drain.
   Printed: the median of each side, the ratio of the medians to FIFO's (target: within
   CPU_TARGET), each round's own ratios, and INFO commandstats per drained job of each side
   (summed over its rounds): where the cost goes.
2. Memory per queued job: INFO used_memory delta / N after the enqueue, read once the
   bench's clients left and after MEMORY PURGE (as bench.cost), per side (target: within
   MEMORY_TARGET of FIFO's). Memory is deterministic: one reading.
3. Enqueue one by one: Redis CPU per enqueue on three agent types side by side (FIFO, fair
   at 1 key, fair at 1,000 keys), in alternated blocks of BATCH jobs within each round, so
   the host's drifting load hits all alike. No target: the enqueue now always sends the
   fairness values and reads the limits' fair_by (one HGET), FIFO included; what that
   adds to FIFO against the release before shows `bench.lua_cpu --baseline`.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.cost_probes import RedisProbe, command_costs, drain_with_worker
from bench.cost_readings import BATCH
from platform_common.jobs.queue import JobQueue, QueueSettings

__all__ = ["CPU_TARGET", "MEMORY_TARGET", "FairCost", "measure_fair", "render_fair"]

CPU_TARGET = 1.25
"""Fair share's drain cost (Redis CPU per job) at most this many times FIFO's."""
MEMORY_TARGET = 1.2
"""Fair share's memory per queued job at most this many times FIFO's."""
MANY_KEYS = 1000
SIDES = ("fifo", "fair 1 key", f"fair {MANY_KEYS:,} keys")
_KEYS = {"fifo": MANY_KEYS, "fair 1 key": 1, f"fair {MANY_KEYS:,} keys": MANY_KEYS}
"""The tenants each side's jobs spread over (FIFO: the 1,000-key jobs, routed as ever)."""
_ENQUEUE_TYPES = {"fifo": "fifo-0000", "fair 1 key": "fair-0001", SIDES[2]: "fair-1000"}
"""One agent type per side for the enqueue blocks, names of one length (same payloads)."""
_SHOWN_USEC = 0.05
"""Commands below this many us per drained job on every side are left out of the table."""
_SLICE = 2000
"""Jobs per enqueue_many call when filling (one call of 8 MB at most, as bench.cost)."""


@dataclass(slots=True)
class FairCost:
    n: int
    drain: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """side -> (Redis CPU seconds per job, jobs/s) per round."""
    commands: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    """side -> INFO commandstats delta summed over its drains."""
    memory: dict[str, float] = field(default_factory=dict)
    """side -> bytes per queued job."""
    enqueue: dict[str, list[float]] = field(default_factory=dict)
    """side -> Redis CPU seconds per enqueue (one by one) per round."""

    def cpu(self, side: str) -> float:
        return statistics.median(c for c, _ in self.drain[side])

    def cpu_ratio(self, side: str) -> float:
        return self.cpu(side) / self.cpu("fifo")

    def memory_ratio(self, side: str) -> float:
        return self.memory[side] / self.memory["fifo"]

    def targets(self) -> list[tuple[str, float, float]]:
        """(what, ratio, target) of every target."""
        return [
            *((f"drain CPU, {side}", self.cpu_ratio(side), CPU_TARGET) for side in SIDES[1:]),
            *((f"queued memory, {side}", self.memory_ratio(side), MEMORY_TARGET)
              for side in SIDES[1:]),
        ]  # fmt: skip

    def met(self) -> bool:
        return all(ratio <= target for _, ratio, target in self.targets())


def _jobs_of(
    jobs: list[dict[str, Any]], side: str, agent_type: str | None = None
) -> list[dict[str, Any]]:
    """`jobs` with their tenant spread round robin over the side's keys (same width)."""
    keys = _KEYS[side]
    return [
        {
            **job,
            "tenant": f"tenant-{i % keys:04d}",
            **({"agent_type": agent_type} if agent_type else {}),
        }
        for i, job in enumerate(jobs)
    ]


async def _fill(url: str, jobs: list[dict[str, Any]], agent_type: str, fair: bool) -> None:
    queue = await JobQueue.connect(QueueSettings.from_url(url))
    try:
        if fair:
            await queue.set_limits(agent_type, fair_by="tenant")
        for start in range(0, len(jobs), _SLICE):
            await queue.enqueue_many(jobs[start : start + _SLICE])
    finally:
        await queue.aclose()


def _add(total: dict[str, tuple[int, int]], delta: dict[str, tuple[int, int]]) -> None:
    for name, (calls, usec) in delta.items():
        before = total.get(name, (0, 0))
        total[name] = (before[0] + calls, before[1] + usec)


async def _enqueue_blocks(
    probe: RedisProbe, jobs: dict[str, list[dict[str, Any]]], index: int
) -> dict[str, float]:
    """Redis CPU seconds per enqueue of each side, one by one, in alternated blocks."""
    types = tuple(_ENQUEUE_TYPES.values())
    queue = await JobQueue.connect(QueueSettings.from_url(probe.url, agent_types=types))
    spent = dict.fromkeys(SIDES, 0.0)
    try:
        for side in SIDES[1:]:
            await queue.set_limits(_ENQUEUE_TYPES[side], fair_by="tenant")
        n = len(jobs["fifo"])
        for block, start in enumerate(range(0, n, BATCH)):
            turn = index + block
            for side in SIDES[turn % 3 :] + SIDES[: turn % 3]:
                cpu = probe.cpu_seconds()
                for job in jobs[side][start : start + BATCH]:
                    await queue.enqueue(job)
                spent[side] += probe.cpu_seconds() - cpu
    finally:
        await queue.aclose()
    return {side: seconds / len(jobs[side]) for side, seconds in spent.items()}


def measure_fair(
    probe: RedisProbe,
    jobs: list[dict[str, Any]],
    *,
    agent_type: str,
    handler: str,
    concurrency: int,
    rounds: int,
    progress: Any = print,
) -> FairCost:
    """`rounds` rotated rounds of drains of `jobs` on each side, the memory per queued job
    of each side, and `rounds` rounds of enqueue one by one."""
    cost = FairCost(len(jobs))
    sides = {side: _jobs_of(jobs, side) for side in SIDES}
    for index in range(rounds):
        for side in SIDES[index % 3 :] + SIDES[: index % 3]:
            progress(f"drain, {len(jobs):,} jobs, {side}, round {index + 1}/{rounds}")
            probe.flush()
            asyncio.run(_fill(probe.url, sides[side], agent_type, side != "fifo"))
            drain = drain_with_worker(
                probe, len(jobs), agent_type=agent_type, handler=handler,
                counter="completed", concurrency=concurrency,
            )  # fmt: skip
            reading = (drain.redis_cpu / len(jobs), len(jobs) / drain.seconds)
            cost.drain.setdefault(side, []).append(reading)
            _add(cost.commands.setdefault(side, {}), drain.commands)
    for side in SIDES:
        progress(f"memory per queued job, {len(jobs):,} jobs, {side}")
        probe.flush()
        base = probe.settled_memory()
        asyncio.run(_fill(probe.url, sides[side], agent_type, side != "fifo"))
        cost.memory[side] = (probe.settled_memory() - base) / len(jobs)
    typed = {side: _jobs_of(jobs, side, _ENQUEUE_TYPES[side]) for side in SIDES}
    for index in range(rounds):
        progress(f"enqueue one by one, {len(jobs):,} jobs per side, round {index + 1}/{rounds}")
        probe.flush()
        for side, per_job in asyncio.run(_enqueue_blocks(probe, typed, index)).items():
            cost.enqueue.setdefault(side, []).append(per_job)
    probe.flush()
    return cost


def _command_lines(cost: FairCost) -> list[str]:
    """Calls and us per drained job of each command, the costliest first; the scripts'
    own commands count twice in Redis' stats: in EVALSHA's time and on their own line."""
    costs = {}
    for side in SIDES:
        drained = cost.n * len(cost.drain[side])
        costs[side] = {c.command: c for c in command_costs(cost.commands[side], drained)}

    def costliest(name: str) -> float:
        return max(costs[side][name].usec_per_job for side in SIDES if name in costs[side])

    lines = [
        "INFO commandstats per drained job, summed over the rounds (calls/job, us/job; "
        "EVALSHA's time holds the commands its scripts run, listed again below it):",
        f"  {'command':<16}" + "".join(f" {side:>22}" for side in SIDES),
    ]
    for name in sorted(set().union(*costs.values()), key=lambda name: -costliest(name)):
        if costliest(name) < _SHOWN_USEC:
            continue
        found = [costs[side].get(name) for side in SIDES]
        cells = [f"{c.calls_per_job:9.3f} {c.usec_per_job:8.2f} us" if c else "-" for c in found]
        lines.append(f"  {name:<16}" + "".join(f" {cell:>22}" for cell in cells))
    return lines


def render_fair(cost: FairCost) -> str:
    def drained(side: str) -> str:
        cpu = [c * 1e6 for c, _ in cost.drain[side]]
        rate = [r for _, r in cost.drain[side]]
        return (
            f"{statistics.median(cpu):6.1f} us/job (min-max {min(cpu):.1f}-{max(cpu):.1f}), "
            f"{statistics.median(rate):,.0f} jobs/s"
        )

    fifo_rounds = [c for c, _ in cost.drain["fifo"]]
    lines = [
        f"Drain of {cost.n:,} jobs by one worker, Redis CPU per job (median of "
        f"{len(fifo_rounds)} rotated rounds):",
        *(f"  {side:<18} {drained(side)}" for side in SIDES),
    ]
    for side in SIDES[1:]:
        own = [c / f for (c, _), f in zip(cost.drain[side], fifo_rounds, strict=True)]
        lines.append(
            f"  {side} / fifo: {cost.cpu_ratio(side):.2f}x; each round's own: "
            + ", ".join(f"{r:.2f}" for r in own)
        )
    lines += _command_lines(cost)
    lines.append(f"Memory per queued job ({cost.n:,} jobs, INFO used_memory delta / N):")
    for side in SIDES:
        ratio = "" if side == "fifo" else f"  {cost.memory_ratio(side):.3f}x fifo"
        lines.append(f"  {side:<18} {cost.memory[side]:8.1f} B{ratio}")
    rounds = len(cost.enqueue["fifo"])
    lines.append(f"Enqueue one by one, Redis CPU per job (median of {rounds} rounds):")
    fifo_enqueue = statistics.median(cost.enqueue["fifo"])
    for side in SIDES:
        per_job = statistics.median(cost.enqueue[side])
        ratio = "" if side == "fifo" else f"  {per_job / fifo_enqueue:.2f}x fifo"
        lines.append(f"  {side:<18} {per_job * 1e6:6.1f} us/job{ratio}")
    verdicts = [
        f"{what} {ratio:.3f}x <= {target}x {'met' if ratio <= target else 'MISSED'}"
        for what, ratio, target in cost.targets()
    ]
    lines.append("targets: " + "; ".join(verdicts))
    return "\n".join(lines)
