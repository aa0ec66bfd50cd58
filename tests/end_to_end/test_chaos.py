"""Chaos: thousands of jobs, 3 agent types, 3 worker processes and 2 producer processes
on a redis-server with AOF `appendfsync always`, while a seeded controller SIGKILLs
workers (a supervisor restarts them), SIGSTOPs one past its lease, kills the workers'
connections (CLIENT KILL USER) and kill -9s / restarts redis-server once.

Afterwards: every enqueued job reached exactly one terminal state; every completion was
recorded once, by the job's last claim; the real exporter's counters equal the ground
truth (and never went backwards meanwhile); processing lists, leases, delayed and expiry
sets are empty. Every process runs under its least-privilege ACL user.

Replay a failure with CHAOS_SEED=<printed seed>; CHAOS_JOBS changes the size.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from platform_common.jobs import acl
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.chaos_processes import QUEUE_SETTINGS, TYPES, plan_jobs, read_ledgers
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer, find_free_port

SEED = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
JOBS = int(os.environ.get("CHAOS_JOBS", "3000"))
ROOT = REPO_ROOT
PASSWORDS = {role: f"chaos-{role}-{SEED:x}" for role in acl.ROLES}
COUNTERS = ("enqueued", "completed", "failed", "dead_lettered", "expired")
DEADLINE = 150.0
"""Seconds the jobs may take to settle after the producers finish (a hang, not a speed
threshold: the run normally settles in a few seconds)."""


@dataclass
class Fleet:
    """The child processes; a supervisor loop restarts workers that die."""

    url: dict[str, str]
    ledger: Path
    logs: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    producers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    exporter: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    supervising: bool = True

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        with (self.logs / f"{name}.log").open("ab") as log:  # the child keeps its own copy
            return subprocess.Popen(
                [sys.executable, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        return self.spawn(
            f"worker-{index}",
            ["-m", "tests.support.chaos_processes", "worker", "--url", self.url["worker"],
             "--ledger", str(self.ledger)],
        )  # fmt: skip

    def supervise(self) -> None:
        for index, process in enumerate(self.workers):
            if self.supervising and process.poll() is not None:
                # A crash loop is a failure, not chaos: the schedule kills only a few.
                assert self.restarts < 30, f"workers keep dying: {self.log_tail()}"
                self.workers[index] = self.start_worker(index)
                self.restarts += 1

    def stop_all(self) -> None:
        for process in [*self.workers, *self.producers, self.exporter]:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + path.read_text(errors="replace")[-1500:]
            for path in sorted(self.logs.glob("*.log"))
        )


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_chaos(tmp_path: Path) -> None:
    print(f"\nchaos seed {SEED} with {JOBS} jobs (replay: CHAOS_SEED={SEED})")
    users = [
        acl.acl_file_line(role, PASSWORDS[role], role).removeprefix("user ") for role in acl.ROLES
    ]
    server = RedisServer(appendonly=True, appendfsync="always", acl_users=users).start()
    (tmp_path / "ledger").mkdir()
    (tmp_path / "logs").mkdir()
    fleet = Fleet(
        url={role: server.url_for(role, PASSWORDS[role]) for role in acl.ROLES},
        ledger=tmp_path / "ledger",
        logs=tmp_path / "logs",
    )
    try:
        await run_chaos(server, fleet)
    except BaseException:
        print(fleet.log_tail())
        raise
    finally:
        fleet.stop_all()
        server.cleanup()


async def run_chaos(server: RedisServer, fleet: Fleet) -> None:
    plan = plan_jobs(SEED, JOBS)
    exporter_port = find_free_port()
    fleet.exporter = fleet.spawn(
        "exporter",
        ["-m", "platform_common.jobs_exporter", "--redis-url", fleet.url["exporter"],
         "--host", "127.0.0.1", "--port", str(exporter_port), "--agent-types", ",".join(TYPES)],
    )  # fmt: skip
    fleet.workers = [fleet.start_worker(index) for index in range(3)]
    metrics_url = f"http://127.0.0.1:{exporter_port}/metrics"
    # The orchestrator's view: every planned job watched, under the producer's ACL user.
    settings = QueueSettings.from_url(fleet.url["producer"], **QUEUE_SETTINGS)
    outcomes: dict[str, str | None] = {}
    deliveries: Counter[str] = Counter()
    async with contextlib.AsyncExitStack() as stack:
        orchestrator = await JobQueue.connect(settings)
        stack.push_async_callback(orchestrator.aclose)
        completions = orchestrator.completions(watch=[(j["agent_type"], j["job_id"]) for j in plan])
        stack.push_async_callback(completions.aclose)

        async def collect() -> None:
            async for completion in completions:
                deliveries[completion.job_id] += 1
                result = completion.result
                outcomes[completion.job_id] = result.status if result else None

        stack.push_async_callback(_cancel, asyncio.create_task(collect()))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=5))
        admin = aioredis.Redis(port=server.port, decode_responses=True)
        stack.push_async_callback(admin.aclose)
        await wait_for(lambda: _healthy(http, metrics_url), 30, "exporter never answered")
        monotonic = MonotonicCheck()
        scraper = asyncio.create_task(monotonic.watch(http, metrics_url))
        stack.push_async_callback(_cancel, scraper)

        fleet.producers = [
            fleet.spawn(
                f"producer-{index}",
                ["-m", "tests.support.chaos_processes", "producer", "--url", fleet.url["producer"],
                 "--ledger", str(fleet.ledger), "--seed", str(SEED), "--count", str(JOBS),
                 "--index", str(index)],
            )
            for index in range(2)
        ]  # fmt: skip
        chaos = Chaos(random.Random(SEED), server, fleet)
        await chaos.run_while(lambda: any(p.poll() is None for p in fleet.producers))
        assert [p.returncode for p in fleet.producers] == [0, 0], "a producer failed"

        async def settled() -> bool:
            fleet.supervise()
            return len(outcomes) == len(plan)

        async def drained() -> bool:
            return await _leftovers(admin) == {}

        await wait_for(settled, DEADLINE, lambda: f"{len(plan) - len(outcomes)} jobs unfinished")
        await wait_for(drained, 30, "processing/leases/delayed/expiry never emptied")
        fleet.supervising = False

        async def workers_ready() -> bool:
            # A worker restarted a moment ago may still be importing: SIGTERM would kill
            # it before its handler is installed. Stop them once all are ready.
            ready = {e["pid"] for e in read_ledgers(fleet.ledger, "worker") if e["e"] == "ready"}
            return all(process.pid in ready for process in fleet.workers)

        await wait_for(workers_ready, 30, "restarted workers never became ready")
        for process in fleet.workers:
            process.terminate()
        for process in fleet.workers:
            assert process.wait(timeout=30) == 0, "a worker did not stop cleanly"
        await _cancel(scraper)
        final = await scrape(http, metrics_url)
        assert final is not None, "the exporter could not read Redis at the end"
        await check(plan, fleet, admin, outcomes, deliveries, final)
        assert monotonic.violations == [], monotonic.violations[:5]
        print(
            f"chaos: {chaos.summary()}, {fleet.restarts} worker restarts, "
            f"{monotonic.scrapes} scrapes, outcomes {dict(Counter(outcomes.values()))}"
        )


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class Chaos:
    """A seeded schedule of faults over the producers' run time."""

    def __init__(self, rng: random.Random, server: RedisServer, fleet: Fleet) -> None:
        self.rng, self.server, self.fleet = rng, server, fleet
        events = [(rng.uniform(0.5, 12.0), "sigkill") for _ in range(5)]
        events += [(rng.uniform(1.0, 12.0), "client-kill") for _ in range(2)]
        events += [(rng.uniform(2.0, 6.0), "sigstop"), (rng.uniform(4.0, 10.0), "restart")]
        self.events = sorted(events)
        self.done: Counter[str] = Counter()

    async def run_while(self, active: Any) -> None:
        started = time.monotonic()
        pending = list(self.events)
        stopped: tuple[subprocess.Popen[bytes], float] | None = None
        while active() or pending or stopped:
            self.fleet.supervise()
            elapsed = time.monotonic() - started
            if stopped and time.monotonic() >= stopped[1]:
                stopped[0].send_signal(signal.SIGCONT)
                self.done["sigcont"] += 1
                stopped = None
            if pending and elapsed >= pending[0][0]:
                _, kind = pending.pop(0)
                stopped = await self.fire(kind, stopped)
            await asyncio.sleep(0.05)  # the schedule's tick, not a synchronisation

    async def fire(
        self, kind: str, stopped: tuple[subprocess.Popen[bytes], float] | None
    ) -> tuple[subprocess.Popen[bytes], float] | None:
        live = [
            p
            for p in self.fleet.workers
            if p.poll() is None and (not stopped or p is not stopped[0])
        ]
        if kind == "sigkill" and live:
            self.rng.choice(live).kill()
        elif kind == "sigstop" and live and stopped is None:
            victim = self.rng.choice(live)
            victim.send_signal(signal.SIGSTOP)
            # Past its lease (2 s) and the reaper's interval: its jobs are taken over.
            stopped = (victim, time.monotonic() + 2.5 * QUEUE_SETTINGS["lease_seconds"])
        elif kind == "client-kill":
            await asyncio.to_thread(self.server.cli, "CLIENT", "KILL", "USER", "worker")
        elif kind == "restart":
            self.server.kill()  # kill -9: what AOF "always" acknowledged must survive
            self.server.start()
        self.done[kind] += 1
        return stopped

    def summary(self) -> str:
        return ", ".join(f"{count} {kind}" for kind, count in sorted(self.done.items()))


async def check(
    plan: list[dict[str, Any]],
    fleet: Fleet,
    admin: aioredis.Redis,
    outcomes: dict[str, str | None],
    deliveries: Counter[str],
    metrics: dict[tuple[str, str], float],
) -> None:
    by_id = {job["job_id"]: job for job in plan}
    acked = {entry["job"] for entry in read_ledgers(fleet.ledger, "producer")}
    assert acked == set(by_id), f"{len(set(by_id) - acked)} planned jobs never acknowledged"
    assert max(deliveries.values()) == 1, "a completion was delivered twice"

    # Exactly one terminal state per job, and the one its kind allows.
    runs = read_ledgers(fleet.ledger, "worker")
    starts = Counter(e["job"] for e in runs if e["e"] == "start")
    max_attempts = QueueSettings.from_url(fleet.url["worker"], **QUEUE_SETTINGS).max_attempts
    for job_id, status in outcomes.items():
        kind = by_id[job_id]["kind"]
        allowed = {"ok": {"succeeded", "failed"}, "poison": {"failed"}, "stall": {"expired"}}
        if kind == "stall" and starts[job_id] >= max_attempts:
            # Every attempt's worker was killed under it before the TTL ran out: a
            # crash counts as an attempt, so the dead-letter queue is right too.
            allowed["stall"] = {"expired", "failed"}
        assert status in allowed[kind], f"{job_id} ({kind}) ended {status}"

    # Counters: the ground truth per type, in Redis and in the exporter's output.
    truth: dict[str, Counter[str]] = defaultdict(Counter)
    for job_id, status in outcomes.items():
        agent_type = by_id[job_id]["agent_type"]
        truth[agent_type]["enqueued"] += 1
        truth[agent_type][{"succeeded": "completed"}.get(str(status), str(status))] += 1
    for agent_type in TYPES:
        expected = truth[agent_type]
        expected["dead_lettered"] = expected["failed"]  # no job here is non-retryable
        keys = QueueKeys(agent_type)
        stats = await admin.hgetall(keys.stats)
        counted = {c: int(stats.get(c, 0)) for c in COUNTERS}
        assert counted == {c: expected[c] for c in COUNTERS}, f"{agent_type} counters in Redis"
        assert await admin.llen(keys.dead) == expected["dead_lettered"]
        for counter in COUNTERS:
            shown = metrics.get((f"jobs_{counter}_total", agent_type))
            assert shown == expected[counter], (agent_type, counter, shown)
        assert metrics[("job_latency_seconds_count", agent_type)] == expected["completed"]
        for gauge in ("queue_depth", "jobs_in_progress", "jobs_delayed"):
            assert metrics[(gauge, agent_type)] == 0, (agent_type, gauge)
        assert metrics[("dead_letter_depth", agent_type)] == expected["dead_lettered"]

    # Each completion was recorded once, by the job's last claim: the stored result
    # names a run that started with the final attempt number and returned, and no two
    # runs of a job ever held the same attempt.
    started = {(e["job"], e["run"]): e for e in runs if e["e"] == "start"}
    ended = {(e["job"], e["run"]) for e in runs if e["e"] == "end"}
    attempts_seen = Counter((e["job"], e["attempt"]) for e in started.values())
    assert max(attempts_seen.values()) == 1, "two runs held the same attempt of a job"
    rerun = 0
    for job_id, status in outcomes.items():
        if status != "succeeded":
            continue
        agent_type = by_id[job_id]["agent_type"]
        keys = QueueKeys(agent_type)
        async with admin.pipeline(transaction=False) as pipe:
            pipe.get(keys.result(job_id))
            pipe.hget(keys.job(job_id), "attempts")
            result, attempts = await pipe.execute()
        assert result is not None and attempts is not None, job_id
        run = result.split('"run":"')[1][:12]
        assert (job_id, run) in ended, f"{job_id}: recorded run {run} never returned"
        assert started[(job_id, run)]["attempt"] == int(attempts), (
            f"{job_id}: claimed again after its recorded completion"
        )
        rerun += sum(1 for (job, _) in started if job == job_id) > 1
    print(f"chaos: {rerun} completed jobs ran more than once (all but one run fenced off)")


async def _leftovers(admin: aioredis.Redis) -> dict[str, int]:
    found: dict[str, int] = {}
    for agent_type in TYPES:
        keys = QueueKeys(agent_type)
        sizes = {
            "queue": await admin.llen(keys.queue),
            "queued": await admin.hlen(keys.queued),
            "arrived": await admin.hlen(keys.arrived),
            "processing": await admin.llen(keys.processing),
            "leases": await admin.zcard(keys.leases),
            "delayed": await admin.zcard(keys.delayed),
            "expiry": await admin.zcard(keys.expiry),
        }
        found |= {f"{agent_type}:{name}": size for name, size in sizes.items() if size}
    return found


class MonotonicCheck:
    """Scrapes during the run: a counter of the exporter must never go backwards."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str], float] = {}
        self.violations: list[str] = []
        self.scrapes = 0

    async def watch(self, http: httpx.AsyncClient, url: str) -> None:
        while True:
            samples = await scrape(http, url)
            if samples:
                self.scrapes += 1
                for key, value in samples.items():
                    if key[0].endswith("_total") and value < self.last.get(key, 0):
                        self.violations.append(f"{key} went {self.last[key]} -> {value}")
                    self.last[key] = value
            await asyncio.sleep(0.5)  # scrape interval


async def scrape(http: httpx.AsyncClient, url: str) -> dict[tuple[str, str], float] | None:
    """{(sample name, agent_type): value}, or None when Redis was unreadable (up 0)."""
    try:
        response = await http.get(url)
    except httpx.HTTPError:
        return None
    samples = {
        (s.name, s.labels.get("agent_type", "")): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
        if "le" not in s.labels
    }
    return samples if samples.get(("queue_exporter_redis_up", "")) == 1 else None


async def _healthy(http: httpx.AsyncClient, url: str) -> bool:
    return await scrape(http, url) is not None


async def wait_for(condition: Any, within: float, problem: Any) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(problem() if callable(problem) else problem)
        await asyncio.sleep(0.1)
