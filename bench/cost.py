"""Cost benchmark (not a test): Redis memory and CPU per job, ours vs raw Redis lists.

    .venv/bin/python -m bench.cost [--jobs 50000] [--sizes 200,512,2048,16384]
        [--concurrency 32] [--rounds 5] [--enqueue-rounds R] [--write-docs]
    .venv/bin/python -m bench.cost --levels [--jobs N] [--rounds R]
    .venv/bin/python -m bench.cost --fair [--jobs N] [--rounds R]

--levels measures only the drain with priority levels (bench/cost_levels.py): three
levels in use against one, side by side; exits 1 past its target. --fair measures only
fair share (bench/cost_fair.py): the drain, memory per queued job and enqueue one by one
with fair share on at 1 and at 1,000 keys against FIFO; exits 1 past its targets.

Starts its own redis-server (no persistence) and, in one run, with N jobs per
measurement (FLUSHALL between measurements, memory read once other clients are gone and
after MEMORY PURGE):

1. Redis memory per job (INFO used_memory delta / N) for payloads of about 0.2, 0.5, 2
   and 16 KiB (encoded; the payload's fields with a filler in `constraints`), queued
   (JobQueue.enqueue_many), running (taken with LMOVE as the worker does, claimed with
   AttemptCalls.claim, no handler run), after success (drained by a worker process with the
   no-op handler) and after dead-lettering (max_attempts 1, bench.handlers:always_fails);
   against raw LPUSH of the same payload JSON to one list, and LMOVE into a processing
   list.
2. Redis CPU per job (INFO used_cpu_sys + used_cpu_user delta / N) and jobs/s of
   enqueue one by one (in blocks alternated with raw LPUSH), enqueue_many, and a full
   drain by one worker process; against raw LPUSH and BRPOP one by one (asyncio
   redis-py), and the worker's own CPU against the raw BRPOP client's. Each in R
   alternated rounds (--rounds, --enqueue-rounds): raw then ours, ours then raw, ...,
   FLUSHALL before each side, the same jobs every round; printed as the median of each
   side, the ratio of the medians, and the min-max of each side and of each round's
   own ratio. One raw reading swings up to 2x on a shared machine (BRPOP drain 9k to
   18k jobs/s, its Redis CPU 7 to 22 us/job, within one run): a single pair measured
   minutes apart mostly compares noise.
3. INFO commandstats per drained job, summed over the drain rounds (the table for
   issue 15's closing note).
4. The ratios of the medians against the targets (met / MISSED), and a sizing table: queued
   jobs a `maxmemory 1gb` Redis holds, drained jobs/s per Redis core. --write-docs puts
   that table and the memory table into docs/operations.md between the cost-table
   markers.

The queue is driven through its API only (JobQueue, QueueConnection, AttemptCalls, QueueKeys
names), so the bench keeps working when the key layout changes. Memory-only readings
(not timed) fill with enqueue_many calls of at most 8 MB of payload and drain with two
worker processes; the timed enqueue_many is one call of N jobs. Exits 1
when a target is missed. Progress goes to stderr; 3.5 minutes at the defaults on 2
cores shared with other work (load average about 2; the rounds take 1.7 of them).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis

from bench.cost_fair import measure_fair, render_fair
from bench.cost_levels import LEVELS_TARGET, measure_levels, render_levels
from bench.cost_probes import RedisProbe, WorkerDrain, drain_with_worker, stats_delta
from bench.cost_readings import BATCH, CostReport, CpuCost, MemoryCost, Reading, Rounds
from bench.cost_report import DOCS, render, targets, write_docs
from bench.handlers import always_fails
from platform_common.jobs.queue import JobQueue, QueueConnection, QueueSettings, builtin
from platform_common.jobs.queue.payload import encode_payload
from platform_common.jobs.worker import AttemptCalls
from tests.support.redis_server import RedisServer

__all__ = ["measure", "payload_jobs"]

DEFAULT_JOBS = 50_000
SIZES = (200, 512, 2048, 16 * 1024)
"""Target encoded payload sizes (bytes); below the smallest valid payload, that one."""
CPU_SIZE = 512
"""The payload size of the CPU and throughput measurements."""
DEFAULT_CONCURRENCY = 32
DEFAULT_ROUNDS = 6
"""Alternated rounds of ours and raw per CPU and rate measurement. One round of each
takes about 15 s at N = 50,000 on 2 cores; on a shared machine one raw reading swings up
to 2x between runs (BRPOP drain 9k-17k jobs/s), so one pair is mostly noise. Even, so
that raw-first and ours-first rounds count equally (raw read slower right after ours)."""
AGENT_TYPE = "dining"
NOOP_HANDLER = f"{builtin.__name__}:{builtin.noop.__name__}"
FAILING_HANDLER = f"{always_fails.__module__}:{always_fails.__name__}"

RAW_QUEUE = "bench:raw:queue"
RAW_PROCESSING = "bench:raw:processing"
MEMORY_WORKERS = 2
"""Worker processes of the drains only memory is read after (not timed): one per core."""
ENQUEUE_SLICE_BYTES = 8 << 20
"""Payload bytes per enqueue_many call when filling for a memory reading. One call is one
pipelined batch whose first reply must come within the socket timeout (5 s): one call of
50,000 jobs of 16 KiB (800 MB) overran it on a loaded 2-core machine."""


async def _command(client: aioredis.Redis, *args: Any) -> Any:
    """One raw command (redis-py's execute_command, the path its command methods take)."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def payload_jobs(n: int, size: int) -> list[dict[str, Any]]:
    """N valid jobs whose payload encodes to `size` bytes (padded with a filler string in
    `constraints`), or to the smallest the payload's fields allow if `size` is below it."""
    created = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    base: dict[str, Any] = {
        "job_id": str(uuid.uuid4()),
        "session_id": "s",
        "orchestrator_id": "o",
        "agent_type": AGENT_TYPE,
        "task": "t",
        "constraints": {},
        "curated_shortlist": [],
        "result_format": "r",
        "created_at": created,
        "ttl_seconds": 3600,
    }
    # Below the size of the filler field itself, the smallest payload: no filler.
    padded = len(encode_payload({**base, "constraints": {"filler": ""}}))
    constraints = {"filler": "x" * (size - padded)} if size >= padded else {}
    return [{**base, "job_id": str(uuid.uuid4()), "constraints": constraints} for _ in range(n)]


# -- ours ---------------------------------------------------------------------------
async def _enqueue_many(
    probe: RedisProbe, jobs: list[dict[str, Any]], *, sliced: bool = False, **overrides: Any
) -> tuple[float, float]:
    """(seconds, Redis CPU seconds) of enqueue_many of `jobs`: one call, or `sliced` into
    calls of at most ENQUEUE_SLICE_BYTES of payload."""
    step = len(jobs)
    if sliced and jobs:
        step = max(1, ENQUEUE_SLICE_BYTES // len(encode_payload(jobs[0])))
    queue = await JobQueue.connect(QueueSettings.from_url(probe.url, **overrides))
    try:
        cpu, began = probe.cpu_seconds(), time.perf_counter()
        for start in range(0, len(jobs), step):
            await queue.enqueue_many(jobs[start : start + step])
        return time.perf_counter() - began, probe.cpu_seconds() - cpu
    finally:
        await queue.aclose()


async def _claim_all(url: str, n: int) -> None:
    """Take the n queued jobs into processing and claim them under a lease, the worker's
    way (Consumer._take's LMOVE, then AttemptCalls.claim), without running a handler."""
    connection = await QueueConnection.open(QueueSettings.from_url(url))
    try:
        leases = AttemptCalls(connection, AGENT_TYPE)
        move = ("LMOVE", leases.keys.queue, leases.keys.processing, "RIGHT", "LEFT")
        tokens = itertools.count()
        claimed = 0
        while claimed < n:
            replies = await connection.execute_many([move] * min(BATCH, n - claimed))
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            taken = [str(job_id) for job_id in replies if job_id is not None]
            if not taken:
                raise RuntimeError(f"the queue ran dry after {claimed} of {n} claims")
            pairs = [(job_id, f"bench-{next(tokens):x}") for job_id in taken]
            _, claims = await leases.claim("bench-cost", pairs)
            if len(claims) != len(taken):
                raise RuntimeError(f"{len(taken) - len(claims)} taken jobs were not claimed")
            claimed += len(claims)
    finally:
        await connection.aclose()


@dataclass(frozen=True, slots=True)
class _Filled:
    """N jobs enqueued with enqueue_many, then drained by the no-op handler."""

    many_seconds: float
    many_cpu: float
    queued: float
    """Bytes per job once enqueued."""
    succeeded: float
    """Bytes per job once every job succeeded."""
    drain: WorkerDrain


def _fill_and_drain(
    probe: RedisProbe, n: int, size: int, concurrency: int, *, processes: int, sliced: bool
) -> _Filled:
    probe.flush()
    base = probe.settled_memory()
    many_seconds, many_cpu = asyncio.run(_enqueue_many(probe, payload_jobs(n, size), sliced=sliced))
    queued = (probe.settled_memory() - base) / n
    drain = drain_with_worker(probe, n, agent_type=AGENT_TYPE, handler=NOOP_HANDLER,
                              counter="completed", concurrency=concurrency,
                              processes=processes)  # fmt: skip
    succeeded = (probe.settled_memory() - base) / n
    probe.flush()
    return _Filled(many_seconds, many_cpu, queued, succeeded, drain)


def _running_memory(probe: RedisProbe, n: int, size: int) -> float:
    """Bytes per job of n jobs claimed under a lease, no handler run."""
    probe.flush()
    base = probe.settled_memory()
    asyncio.run(_enqueue_many(probe, payload_jobs(n, size), sliced=True))
    asyncio.run(_claim_all(probe.url, n))
    running = (probe.settled_memory() - base) / n
    probe.flush()
    return running


def _dead_memory(probe: RedisProbe, n: int, size: int, concurrency: int) -> float:
    """Bytes per job of n jobs dead-lettered after their one attempt raised."""
    probe.flush()
    base = probe.settled_memory()
    asyncio.run(_enqueue_many(probe, payload_jobs(n, size), sliced=True, max_attempts=1))
    drain_with_worker(probe, n, agent_type=AGENT_TYPE, handler=FAILING_HANDLER,
                      counter="dead_lettered", concurrency=concurrency,
                      processes=MEMORY_WORKERS)  # fmt: skip
    dead = (probe.settled_memory() - base) / n
    probe.flush()
    return dead


# -- raw lists ----------------------------------------------------------------------
async def _raw_push(probe: RedisProbe, payloads: list[bytes]) -> tuple[float, float]:
    """(seconds, Redis CPU seconds) of LPUSH of `payloads`, BATCH per command."""
    client = aioredis.Redis.from_url(probe.url)
    try:
        await _command(client, "PING")
        cpu, began = probe.cpu_seconds(), time.perf_counter()
        for start in range(0, len(payloads), BATCH):
            await _command(client, "LPUSH", RAW_QUEUE, *payloads[start : start + BATCH])
        return time.perf_counter() - began, probe.cpu_seconds() - cpu
    finally:
        await client.aclose()


async def _raw_take_all(url: str, n: int) -> None:
    """LMOVE every raw payload into a processing list (the raw 'running' state)."""
    client = aioredis.Redis.from_url(url)
    try:
        for start in range(0, n, BATCH):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(BATCH, n - start)):
                pipe.lmove(RAW_QUEUE, RAW_PROCESSING, "RIGHT", "LEFT")
            if None in await pipe.execute():
                raise RuntimeError("the raw list ran dry")
    finally:
        await client.aclose()


def _raw_memory(probe: RedisProbe, n: int, size: int) -> dict[str, float]:
    payloads = [encode_payload(job) for job in payload_jobs(n, size)]
    probe.flush()
    base = probe.settled_memory()
    asyncio.run(_raw_push(probe, payloads))
    queued = (probe.settled_memory() - base) / n
    asyncio.run(_raw_take_all(probe.url, n))
    running = (probe.settled_memory() - base) / n
    probe.flush()
    return {"queued": queued, "running": running, "after success": 0.0, "dead-lettered": 0.0}


def measure_memory(
    probe: RedisProbe, n: int, target: int, concurrency: int, filled: _Filled | None = None
) -> MemoryCost:
    """Every state of one payload size, ours and raw; `filled`: this size's queued and
    succeeded readings, taken already (by the CPU measurement)."""
    size = len(encode_payload(payload_jobs(1, target)[0]))
    raw = _raw_memory(probe, n, target)
    if filled is None:
        filled = _fill_and_drain(
            probe, n, target, concurrency, processes=MEMORY_WORKERS, sliced=True
        )
    ours = {
        "queued": filled.queued,
        "running": _running_memory(probe, n, target),
        "after success": filled.succeeded,
        "dead-lettered": _dead_memory(probe, n, target, concurrency),
    }
    return MemoryCost(target, size, ours, raw)


# -- CPU and rates ------------------------------------------------------------------
async def _enqueue_vs_lpush(
    probe: RedisProbe, jobs: list[dict[str, Any]], payloads: list[bytes], *, raw_first: bool
) -> tuple[Reading, Reading]:
    """(ours, raw) of enqueue one by one and raw LPUSH one by one, in alternated blocks of
    BATCH (`raw_first`: LPUSH's block first in each pair), so the host's drifting load
    (other processes on the machine) hits both alike."""
    queue = await JobQueue.connect(QueueSettings.from_url(probe.url))
    client = aioredis.Redis.from_url(probe.url)
    totals = {"ours": [0.0, 0.0], "raw": [0.0, 0.0]}

    async def lpush(start: int) -> None:
        for payload in payloads[start : start + BATCH]:
            await _command(client, "LPUSH", RAW_QUEUE, payload)

    async def enqueue(start: int) -> None:
        for job in jobs[start : start + BATCH]:
            await queue.enqueue(job)

    order = (("raw", lpush), ("ours", enqueue))
    try:
        await _command(client, "PING")
        for start in range(0, len(jobs), BATCH):
            for side, run in order if raw_first else order[::-1]:
                cpu, began = probe.cpu_seconds(), time.perf_counter()
                await run(start)
                totals[side][0] += time.perf_counter() - began
                totals[side][1] += probe.cpu_seconds() - cpu
    finally:
        await queue.aclose()
        await client.aclose()
    return Reading(*totals["ours"]), Reading(*totals["raw"])


async def _brpop_all(probe: RedisProbe, n: int) -> tuple[Reading, dict[str, tuple[int, int]]]:
    """Raw BRPOP one by one of n payloads: the reading (with this process's CPU) and the
    commandstats delta."""
    client = aioredis.Redis.from_url(probe.url)
    try:
        await _command(client, "PING")
        stats, cpu = probe.command_stats(), probe.cpu_seconds()
        own, began = time.process_time(), time.perf_counter()
        for _ in range(n):
            if await _command(client, "BRPOP", RAW_QUEUE, 1) is None:
                raise RuntimeError("the raw list ran dry")
        seconds, own = time.perf_counter() - began, time.process_time() - own
        reading = Reading(seconds, probe.cpu_seconds() - cpu, own)
        return reading, stats_delta(stats, probe.command_stats())
    finally:
        await client.aclose()


def _add_stats(total: dict[str, tuple[int, int]], delta: dict[str, tuple[int, int]]) -> None:
    for name, (calls, usec) in delta.items():
        calls_before, usec_before = total.get(name, (0, 0))
        total[name] = (calls_before + calls, usec_before + usec)


def measure_cpu(
    probe: RedisProbe, n: int, size: int, concurrency: int, rounds: int, enqueue_rounds: int
) -> tuple[CpuCost, _Filled]:
    """The CPU and rate measurements, each in alternated rounds of ours and raw with
    FLUSHALL between sides (raw first in even rounds, ours first in odd ones), same
    jobs and payloads every round; with the queued and succeeded memory readings of
    the first round's enqueue_many and drain, which measure_memory takes for this size
    (memory is deterministic: one reading)."""
    jobs = payload_jobs(n, size)
    payloads = [encode_payload(job) for job in jobs]
    enqueue = Rounds([], [])
    for index in range(enqueue_rounds):
        _progress(
            f"enqueue one by one vs LPUSH one by one, {n:,} jobs, "
            f"round {index + 1}/{enqueue_rounds}"
        )
        probe.flush()
        ours, raw = asyncio.run(_enqueue_vs_lpush(probe, jobs, payloads, raw_first=index % 2 == 0))
        enqueue.ours.append(ours)
        enqueue.raw.append(raw)
    probe.flush()
    many, drain = Rounds([], []), Rounds([], [])
    drain_commands: dict[str, tuple[int, int]] = {}
    brpop_commands: dict[str, tuple[int, int]] = {}
    first: _Filled | None = None
    for index in range(rounds):
        raw_first = index % 2 == 0
        _progress(
            f"drain, {n:,} jobs, round {index + 1}/{rounds}: "
            + ("raw batched LPUSH + BRPOP, then ours" if raw_first else
               "ours, then raw batched LPUSH + BRPOP")
        )  # fmt: skip
        for side in ("raw", "ours") if raw_first else ("ours", "raw"):
            if side == "raw":
                probe.flush()
                batched_seconds, batched_cpu = asyncio.run(_raw_push(probe, payloads))
                brpop, commands = asyncio.run(_brpop_all(probe, n))
                probe.flush()
                many.raw.append(Reading(batched_seconds, batched_cpu))
                drain.raw.append(brpop)
                _add_stats(brpop_commands, commands)
            else:
                filled = _fill_and_drain(probe, n, size, concurrency, processes=1, sliced=False)
                first = first or filled
                many.ours.append(Reading(filled.many_seconds, filled.many_cpu))
                worker = filled.drain
                drain.ours.append(Reading(worker.seconds, worker.redis_cpu, worker.worker_cpu))
                _add_stats(drain_commands, worker.commands)
    assert first is not None  # rounds >= 1
    cost = CpuCost(len(payloads[0]), enqueue, many, drain, drain_commands, brpop_commands)
    return cost, first


def measure(
    url: str,
    n: int,
    sizes: tuple[int, ...] = SIZES,
    concurrency: int = DEFAULT_CONCURRENCY,
    cpu_size: int = CPU_SIZE,
    rounds: int = DEFAULT_ROUNDS,
    enqueue_rounds: int = DEFAULT_ROUNDS,
) -> CostReport:
    """Every measurement against the Redis at `url`, which nothing else may use
    meanwhile (it is flushed between measurements); the CPU and rate measurements in
    `rounds` (drain, enqueue_many) and `enqueue_rounds` (enqueue one by one) alternated
    rounds of ours and raw."""
    if n < 1 or concurrency < 1 or not sizes or min(sizes) < 1 or min(rounds, enqueue_rounds) < 1:
        raise ValueError(
            f"need n >= 1, concurrency >= 1, rounds >= 1 and positive sizes; got n={n}, "
            f"concurrency={concurrency}, rounds={rounds}, enqueue_rounds={enqueue_rounds}, "
            f"sizes={sizes}"
        )
    probe = RedisProbe(url)
    load_before = os.getloadavg()[0]
    try:
        version = probe.version()
        cpu, filled = measure_cpu(probe, n, cpu_size, concurrency, rounds, enqueue_rounds)
        memory = []
        for size in sizes:
            _progress(f"memory per job, {size:,}-byte payloads")
            reuse = filled if size == cpu_size else None
            memory.append(measure_memory(probe, n, size, concurrency, reuse))
    finally:
        probe.close()
    return CostReport(n, concurrency, memory, cpu, version, (load_before, os.getloadavg()[0]))


def _progress(step: str) -> None:
    """Where the run is, on stderr (the tables go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {step}", file=sys.stderr, flush=True)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of bytes: {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be positive byte counts: {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="N per measurement")
    parser.add_argument("--sizes", type=_sizes, default=SIZES, help="payload bytes, e.g. 200,512")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS,
        help="alternated rounds of ours and raw for the drain and enqueue_many "
        "(median and min-max reported)",
    )  # fmt: skip
    parser.add_argument(
        "--enqueue-rounds", type=int, default=None,
        help="the same for enqueue one by one vs LPUSH one by one (default: --rounds)",
    )  # fmt: skip
    parser.add_argument(
        "--write-docs", action="store_true",
        help=f"rewrite the cost table between the markers of {DOCS.name}",
    )  # fmt: skip
    parser.add_argument(
        "--levels", action="store_true",
        help="only the drain on three priority levels against one (bench/cost_levels.py)",
    )  # fmt: skip
    parser.add_argument(
        "--fair", action="store_true",
        help="only fair share at 1 and 1,000 keys against FIFO (bench/cost_fair.py)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.fair:
        with RedisServer() as server:
            probe = RedisProbe(server.url)
            try:
                fair = measure_fair(
                    probe, payload_jobs(args.jobs, CPU_SIZE), agent_type=AGENT_TYPE,
                    handler=NOOP_HANDLER, concurrency=args.concurrency, rounds=args.rounds,
                    progress=_progress,
                )  # fmt: skip
            finally:
                probe.close()
        print(render_fair(fair))
        return 0 if fair.met() else 1
    if args.levels:
        with RedisServer() as server:
            probe = RedisProbe(server.url)
            try:
                cost = measure_levels(
                    probe, payload_jobs(args.jobs, CPU_SIZE), agent_type=AGENT_TYPE,
                    handler=NOOP_HANDLER, concurrency=args.concurrency, rounds=args.rounds,
                    progress=_progress,
                )  # fmt: skip
            finally:
                probe.close()
        print(render_levels(cost))
        return 0 if cost.ratio() <= LEVELS_TARGET else 1
    if args.enqueue_rounds is None:
        args.enqueue_rounds = args.rounds
    if min(args.jobs, args.concurrency, args.rounds, args.enqueue_rounds) < 1:
        parser.error("--jobs, --concurrency, --rounds and --enqueue-rounds must be at least 1")
    began = time.monotonic()
    with RedisServer() as server:
        report = measure(
            server.url, args.jobs, args.sizes, args.concurrency,
            rounds=args.rounds, enqueue_rounds=args.enqueue_rounds,
        )  # fmt: skip
    print(render(report))
    print(f"(measured in {time.monotonic() - began:.0f} s, {os.cpu_count()} cores)")
    if args.write_docs:
        command = " ".join([".venv/bin/python -m bench.cost", *(argv or sys.argv[1:])])
        write_docs(report, command)
        print(f"wrote the cost table into {DOCS}")
    return 0 if all(ok for _, ok in targets(report) if ok is not None) else 1


if __name__ == "__main__":
    sys.exit(main())
