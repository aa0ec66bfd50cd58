"""Fairness benchmark (not a test): how long a small tenant waits behind a big one, with
fair share off and on.

    .venv/bin/python -m bench.fairness [--a-jobs 10000] [--b-jobs 50] [--concurrency 8]
                                      [--handler-ms 5]

Starts its own redis-server and, twice in one run (fair share off: `fair_by` none,
plain FIFO; then on: `fair_by` tenant), on an emptied Redis: one worker process
(`python -m platform_common.jobs.worker`, the bench.handlers:naps_for handler, which
sleeps --handler-ms) is started and ready; tenant A enqueues --a-jobs jobs (one
enqueue_many call), then tenant B enqueues --b-jobs (one more call); the bench waits
until every job completed, stops the worker and reads each job's record.

Start times come from the job records: the claim script writes `started_at` (Redis TIME,
ms) into each job's hash when it starts the job, and the enqueue stamps `enqueued_at` from
the same clock; after success the record stays for the job's TTL (an hour here), so all
of them are read once the drain is over (HMGET, pipelined). One clock for both ends, no
work added to the handler, and nothing read while the worker runs. Per side:

- A waiting: A's jobs not started yet when B's first job was enqueued.
- A started in B's window: A's jobs whose started_at lies between B's first enqueued_at
  and B's last started_at, both ends included (a millisecond shared with an end counts:
  at most the jobs of one take, concurrency, more than the exact count). FIFO makes B
  wait for every A job still waiting; fair share (two keys and the shared list's turn,
  served round robin) starts one of B's jobs per turn of A's, so about --b-jobs.
- B's wait: started_at - enqueued_at of each of B's jobs, p50, p95 and max (nearest
  rank).

The criterion (exit 1 when missed): with fair share on, both the A jobs started in B's
window and B's p95 wait are at most a tenth (FAIRNESS_FACTOR) of fair share off's. At the
defaults that is about 50 against 10,000 and tens of ms against seconds; a miss means B
was not served in turn. The run takes about 25 s at the defaults (A drains in
10,000 x 5 ms / 8 = 6 s per side, plus the worker's start and the enqueues).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.cost_probes import RedisProbe, WorkerProcess
from bench.handlers import NAP_MS_VARIABLE, naps_for
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer

__all__ = ["FAIRNESS_FACTOR", "Fairness", "Side", "main", "measure", "render"]

AGENT_TYPE = "dining"
KEYS = QueueKeys(AGENT_TYPE)
HANDLER = f"{naps_for.__module__}:{naps_for.__name__}"
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
FAIRNESS_FACTOR = 10
"""Fair share on: A's starts in B's window and B's p95 wait at most 1/this of off's."""
JOB_TTL_SECONDS = 3600
"""Long enough that no job expires while it waits and every record outlives the run."""
DRAIN_TIMEOUT_SECONDS = 900.0
_POLL_SECONDS = 0.01
_READ_BATCH = 1000


def nearest_rank(values: list[int], fraction: float) -> int:
    """The value at `fraction` (0 < fraction <= 1) of the sorted values, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Side:
    """One drain: fair share off or on."""

    fair_by: str
    a_waiting: int
    """A's jobs not started when B's first job was enqueued."""
    a_in_window: int
    """A's jobs started between B's first enqueue and B's last start, ends included."""
    b_waits_ms: list[int]
    """Each of B's jobs: started_at - enqueued_at (ms)."""
    seconds: float
    """From A's enqueue until every job completed."""

    def wait(self, fraction: float) -> int:
        return nearest_rank(self.b_waits_ms, fraction)


@dataclass(frozen=True, slots=True)
class Fairness:
    a_jobs: int
    b_jobs: int
    concurrency: int
    handler_ms: float
    off: Side
    on: Side

    def met(self) -> bool:
        """FAIRNESS_FACTOR: on beats off by that much on both counts (off's at least 1)."""
        return self.on.a_in_window * FAIRNESS_FACTOR <= max(
            self.off.a_in_window, 1
        ) and self.on.wait(0.95) * FAIRNESS_FACTOR <= max(self.off.wait(0.95), 1)


async def _enqueue(url: str, fair_by: str, a_jobs: int, b_jobs: int) -> tuple[list[str], list[str]]:
    """Fair share set to `fair_by`, then A's jobs in one call, then B's in one: their ids."""
    queue = await JobQueue.connect(QueueSettings.from_url(url))
    try:
        await queue.set_limits(AGENT_TYPE, fair_by=fair_by)
        a = [
            make_job(AGENT_TYPE, tenant=TENANT_A, ttl_seconds=JOB_TTL_SECONDS)
            for _ in range(a_jobs)
        ]
        b = [
            make_job(AGENT_TYPE, tenant=TENANT_B, ttl_seconds=JOB_TTL_SECONDS)
            for _ in range(b_jobs)
        ]
        return await queue.enqueue_many(a), await queue.enqueue_many(b)
    finally:
        await queue.aclose()


def _wait_drained(probe: RedisProbe, worker: WorkerProcess, jobs: int) -> None:
    began = time.monotonic()
    while True:
        counts = probe.counters(KEYS.stats, ["completed", "failed", "expired"])
        if counts["completed"] >= jobs:
            return
        if counts["failed"] or counts["expired"]:
            raise RuntimeError(
                f"jobs ended otherwise than completed: {counts}; " + worker.log_tail()
            )
        if worker.process.poll() is not None or time.monotonic() - began > DRAIN_TIMEOUT_SECONDS:
            raise RuntimeError(
                f"the worker did not drain {jobs} jobs: {counts}; " + worker.log_tail()
            )
        time.sleep(_POLL_SECONDS)


def _records(probe: RedisProbe, ids: list[str]) -> list[tuple[int, int]]:
    """(enqueued_at, started_at) of each job, ms; an error if one did not succeed."""
    times: list[tuple[int, int]] = []
    for start in range(0, len(ids), _READ_BATCH):
        chunk = ids[start : start + _READ_BATCH]
        pipe = probe.admin.pipeline(transaction=False)
        for job_id in chunk:
            pipe.hmget(KEYS.job(job_id), ["state", "enqueued_at", "started_at"])
        for job_id, (state, enqueued, started) in zip(chunk, pipe.execute(), strict=True):
            if state != "succeeded" or enqueued is None or started is None:
                raise RuntimeError(f"job {job_id}: state {state!r}, enqueued_at {enqueued!r}, "
                                   f"started_at {started!r}")  # fmt: skip
            times.append((int(enqueued), int(started)))
    return times


def measure_side(
    probe: RedisProbe, fair_by: str, a_jobs: int, b_jobs: int, concurrency: int, handler_ms: float
) -> Side:
    probe.flush()
    worker = WorkerProcess(
        probe.url, AGENT_TYPE, HANDLER, concurrency, env={NAP_MS_VARIABLE: str(handler_ms)}
    )
    try:
        if not worker.ready.wait(60):
            raise RuntimeError("worker did not start: " + worker.log_tail())
        began = time.perf_counter()
        a_ids, b_ids = asyncio.run(_enqueue(probe.url, fair_by, a_jobs, b_jobs))
        _wait_drained(probe, worker, a_jobs + b_jobs)
        seconds = time.perf_counter() - began
    finally:
        worker.stop()
    a, b = _records(probe, a_ids), _records(probe, b_ids)
    probe.flush()
    b_first = min(enqueued for enqueued, _ in b)
    b_last = max(started for _, started in b)
    return Side(
        fair_by,
        a_waiting=sum(1 for _, started in a if started >= b_first),
        a_in_window=sum(1 for _, started in a if b_first <= started <= b_last),
        b_waits_ms=[started - enqueued for enqueued, started in b],
        seconds=seconds,
    )


def measure(
    url: str, a_jobs: int, b_jobs: int, concurrency: int, handler_ms: float, progress: Any = print
) -> Fairness:
    """Both sides against the Redis at `url`, which nothing else may use meanwhile (it is
    flushed before and after each)."""
    if min(a_jobs, b_jobs, concurrency) < 1 or handler_ms < 0:
        raise ValueError(
            f"need a_jobs, b_jobs, concurrency >= 1 and handler_ms >= 0; got {a_jobs}, "
            f"{b_jobs}, {concurrency}, {handler_ms}"
        )
    probe = RedisProbe(url)
    try:
        sides = []
        for fair_by in ("none", "tenant"):
            progress(f"fair_by {fair_by}: {a_jobs:,} jobs of A, then {b_jobs:,} of B")
            sides.append(measure_side(probe, fair_by, a_jobs, b_jobs, concurrency, handler_ms))
    finally:
        probe.close()
    return Fairness(a_jobs, b_jobs, concurrency, handler_ms, *sides)


def render(result: Fairness) -> str:
    off, on = result.off, result.on

    def row(name: str, side: Side) -> str:
        return (
            f"{name:<22} {side.a_waiting:>11,} {side.a_in_window:>11,} {side.wait(0.5):>11,} "
            f"{side.wait(0.95):>7,} {max(side.b_waits_ms):>7,} {side.seconds:>7.1f}"
        )

    def ratio(on_value: int, off_value: int) -> str:
        return f"{on_value / off_value:.3f}x" if off_value else "-"

    verdict = "met" if result.met() else "MISSED"
    return "\n".join(
        [
            f"Tenant A enqueues {result.a_jobs:,} jobs, then tenant B {result.b_jobs:,}; one "
            f"worker process, concurrency {result.concurrency}, {result.handler_ms:g} ms jobs",
            f"{'':<22} {'A waiting':>11} {'A started':>11} {'B wait p50':>11} "
            f"{'p95':>7} {'max':>7} {'drain':>7}",
            f"{'':<22} {'when B came':>11} {'in B window':>11} {'(ms)':>11} {'(ms)':>7} "
            f"{'(ms)':>7} {'(s)':>7}",
            row("fair_by none (FIFO)", off),
            row("fair_by tenant", on),
            f"{'on / off':<22} {'':>11} {ratio(on.a_in_window, off.a_in_window):>11} "
            f"{ratio(on.wait(0.5), off.wait(0.5)):>11} {ratio(on.wait(0.95), off.wait(0.95)):>7}",
            f"criterion: fair share on, A started in B's window and B's p95 wait at most "
            f"1/{FAIRNESS_FACTOR} of off's: {verdict}",
        ]
    )


def _progress(step: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {step}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--a-jobs", type=int, default=10_000, help="tenant A's jobs, first")
    parser.add_argument("--b-jobs", type=int, default=50, help="tenant B's jobs, after A's")
    parser.add_argument("--concurrency", type=int, default=8, help="the one worker's slots")
    parser.add_argument("--handler-ms", type=float, default=5.0, help="each job's sleep")
    args = parser.parse_args(argv)
    if min(args.a_jobs, args.b_jobs, args.concurrency) < 1 or args.handler_ms < 0:
        parser.error("--a-jobs, --b-jobs and --concurrency must be at least 1, --handler-ms >= 0")
    with RedisServer() as server:
        result = measure(
            server.url, args.a_jobs, args.b_jobs, args.concurrency, args.handler_ms,
            progress=_progress,
        )  # fmt: skip
    print(render(result))
    return 0 if result.met() else 1


if __name__ == "__main__":
    sys.exit(main())
