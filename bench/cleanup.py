"""Cleanup cost benchmark (not a test): Redis blocking time of one cleanup run, by backlog.

    .venv/bin/python -m bench.cleanup [--rounds 5] [--backlogs 1000,300000] [--no-old]

Starts its own redis-server. For each backlog, enqueues that many long-lived jobs, then
per round 100 jobs behind them (newer, nearer the producing end) whose TTL has passed,
and runs one cleanup (JobQueue.cleanup, batch 100). Redis's own view is the measure:
INFO commandstats (reset before each run) gives the microseconds the server spent in the
run's ZRANGEBYSCORE and script, i.e. how long it blocked every other client. The script
as it was before expiry became lazy (`git show OLD_REVISION:...queue_expire.lua`, which
took each expired waiting job off the queue list with LREM) then runs on the same data,
as the before; --no-old skips it (e.g. outside a git checkout). Prints the median
per backlog side by side, the ratio of the largest backlog to the smallest, and whether
the target "largest <= 2x smallest" is met.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench.queue_throughput import AGENT_TYPE, make_jobs
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.redis_server import RedisServer
from tests.support.stored_jobs import make_packed_due, to_job_hash

ROOT = Path(__file__).resolve().parent.parent
EXPIRED_PER_RUN = 100
KEYS = QueueKeys(AGENT_TYPE)
TARGET_RATIO = 2.0
CLEANUP_COMMANDS = ("zrangebyscore", "lrange", "evalsha", "eval")
"""What a cleanup run sends that costs Redis time (its TIME call is a few microseconds)."""


OLD_REVISION = "847770081187a166eb648cd17c8bebf1ab5a8758"
"""The last commit whose queue_expire.lua took expired waiting jobs off the list (LREM)."""


def old_script() -> str | None:
    """queue_expire.lua as of OLD_REVISION, or None outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "show", f"{OLD_REVISION}:platform_common/jobs/lua/queue_expire.lua"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None


async def blocking_usec(client: aioredis.Redis, run: Callable[[], Awaitable[Any]]) -> int:
    """Microseconds Redis spent in the cleanup commands `run` sent, by INFO commandstats
    (reset first): the ZRANGEBYSCORE that picks the candidates and the script, whose
    time includes every command it calls. Those inner commands are listed too, under
    their own names: summing every entry would count them twice."""
    await client.config_resetstat()
    await run()
    stats = await client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in CLEANUP_COMMANDS)


async def add_due_jobs(queue: JobQueue, client: aioredis.Redis, version: str) -> list[str]:
    """EXPIRED_PER_RUN new jobs (behind the backlog), their TTL moved into the past: packed
    in the queued hash with their expiry bucket past, as this version keeps them; for the
    old script, in the form it expires (a job hash with its expiry set entry)."""
    ids = await queue.enqueue_many(make_jobs(EXPIRED_PER_RUN))
    await make_packed_due(client, KEYS, ids)
    if version == "old":
        for job_id in ids:
            await to_job_hash(client, KEYS, job_id)
    return ids


async def run_old(client: aioredis.Redis, source: str) -> None:
    """One cleanup run with OLD_REVISION's script: the same candidates, its own KEYS layout."""
    seconds, micros = await client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    due = await client.zrangebyscore(KEYS.expiry, "-inf", now_ms, start=0, num=EXPIRED_PER_RUN)
    keys = [KEYS.expiry, KEYS.queue, KEYS.delayed, KEYS.processing, KEYS.leases, KEYS.stats]
    keys.append(KEYS.waiting)
    for job_id in due:
        keys += [KEYS.job(job_id), KEYS.result(job_id)]
    await client.eval(source, len(keys), *keys, KEYS.channel, *due)  # type: ignore[misc]


async def measure(url: str, backlog: int, rounds: int, old: str | None) -> dict[str, list[int]]:
    """Blocking usec per cleanup run with `backlog` jobs queued, per script version."""
    client = aioredis.Redis.from_url(url, decode_responses=True)
    queue = await JobQueue.connect(QueueSettings.from_url(url, cleanup_batch=EXPIRED_PER_RUN))
    try:
        await client.flushdb()
        for start in range(0, backlog, 10_000):
            await queue.enqueue_many(make_jobs(min(10_000, backlog - start)))
        runs: dict[str, list[int]] = {"new": [], "old": []}
        # One version after the other: the old one's list scans would evict the caches
        # the new one runs with. Round 0 warms up (it compiles the script): not kept.
        for version in ("new", "old") if old else ("new",):
            for round_number in range(rounds + 1):
                ids = await add_due_jobs(queue, client, version)
                if version == "new":
                    usec = await blocking_usec(client, lambda: queue.cleanup(AGENT_TYPE))
                else:
                    assert old is not None
                    usec = await blocking_usec(client, lambda: run_old(client, old))
                left = await client.zscore(KEYS.expiry, ids[0]) is not None
                if left or await client.hexists(KEYS.queued, ids[0]):
                    raise RuntimeError(f"the {version} cleanup did not expire the due jobs")
                if round_number:
                    runs[version].append(usec)
        return runs
    finally:
        await queue.aclose()
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backlogs", default="1000,300000", help="comma-separated job counts")
    parser.add_argument("--no-old", action="store_true", help="skip the LREM script (OLD_REVISION)")
    args = parser.parse_args()
    backlogs = [int(text) for text in args.backlogs.split(",")]
    old = None if args.no_old else old_script()
    with RedisServer() as server:
        results = {n: asyncio.run(measure(server.url, n, args.rounds, old)) for n in backlogs}
    versions = ["new", "old"] if old else ["new"]
    names = {"new": "this tree", "old": "before (LREM)"}
    print(
        f"Redis blocking time per cleanup run ({EXPIRED_PER_RUN} expired jobs queued behind "
        f"the backlog), ms, median of {args.rounds} (INFO commandstats)"
    )
    header = "".join(f"{f'{n:,} queued':>16}" for n in backlogs)
    print(f"{'script':<12}{header}{'ratio':>9}  target <= {TARGET_RATIO:g}x")
    for version in versions:
        medians = [statistics.median(results[n][version]) / 1000 for n in backlogs]
        ratio = medians[-1] / medians[0] if medians[0] else float("inf")
        verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
        cells = "".join(f"{value:>16.3f}" for value in medians)
        print(f"{names[version]:<12}{cells}{ratio:>8.2f}x  {verdict}")


if __name__ == "__main__":
    main()
