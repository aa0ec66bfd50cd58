"""What bench.cost reads off one Redis and one worker process: memory, CPU, commandstats.

Every reading goes through INFO (or /proc for the worker), never through the queue's
keys, except the worker's own counters (QueueKeys names) to know when a drain is done.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import ResponseError

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import QueueSettings
from tests.support.sync_redis import sync_reply

__all__ = [
    "CommandCost",
    "RedisProbe",
    "WorkerDrain",
    "WorkerProcess",
    "command_costs",
    "drain_with_worker",
    "process_cpu_seconds",
    "stats_delta",
]

ROOT = Path(__file__).resolve().parent.parent

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_POLL_SECONDS = 0.01
_ENDED = ("completed", "failed", "expired")
"""The stats counters of jobs that ended (keys.py: dead-lettered jobs count as failed)."""


@dataclass(frozen=True, slots=True)
class CommandCost:
    """One command's share of a measured span, per job."""

    command: str
    calls_per_job: float
    usec_per_call: float

    @property
    def usec_per_job(self) -> float:
        return self.calls_per_job * self.usec_per_call


@dataclass(frozen=True, slots=True)
class WorkerDrain:
    """One worker process emptying the queue: from its 'worker ready' line until the
    watched counter reached N (start-up and shutdown are not counted)."""

    seconds: float
    worker_cpu: float
    """The worker process's CPU seconds (all its threads) over the drain."""
    redis_cpu: float
    """Redis's CPU seconds (used_cpu_sys + used_cpu_user) over the drain."""
    commands: dict[str, tuple[int, int]]
    """INFO commandstats delta over the drain: command -> (calls, usec), the bench's own
    polling taken out."""


class RedisProbe:
    """The bench's own connection to the Redis it measures, and its readings."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.admin = redis.Redis.from_url(url, decode_responses=True)
        self.idle_clients = self._clients()
        """Clients connected before the bench began (this one included): a memory
        reading waits until every client the bench started has gone."""

    def _clients(self) -> int:
        return int(sync_reply(self.admin.info("clients"))["connected_clients"])

    def version(self) -> str:
        return str(sync_reply(self.admin.info("server"))["redis_version"])

    def flush(self) -> None:
        """Empty every database now (not ASYNC: memory is given back before the reply)."""
        self.admin.flushall(asynchronous=False)

    def cpu_seconds(self) -> float:
        """used_cpu_sys + used_cpu_user: every thread of redis-server."""
        info = sync_reply(self.admin.info("cpu"))
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def command_stats(self) -> dict[str, tuple[int, int]]:
        """command -> (calls, usec) since the server started; INFO (the bench's) left out."""
        stats: dict[str, Any] = sync_reply(self.admin.info("commandstats"))
        return {
            name.removeprefix("cmdstat_"): (int(entry["calls"]), int(entry["usec"]))
            for name, entry in stats.items()
            if name != "cmdstat_info"
        }

    def settled_memory(self, timeout: float = 30.0) -> int:
        """used_memory once the clients the bench started have gone (a client's buffers
        count in used_memory) and the allocator was asked to give back what it can."""
        deadline = time.monotonic() + timeout
        while self._clients() > self.idle_clients:
            if time.monotonic() > deadline:
                raise RuntimeError("the bench's clients stayed connected: memory not read")
            time.sleep(_POLL_SECONDS)
        with contextlib.suppress(ResponseError):  # not jemalloc: nothing to purge
            self.admin.memory_purge()
        return int(sync_reply(self.admin.info("memory"))["used_memory"])

    def counters(self, key: str, fields: list[str]) -> dict[str, int]:
        """Integer fields of hash `key` (0 when absent): one HMGET."""
        values = sync_reply(self.admin.hmget(key, fields))
        return {field: int(value or 0) for field, value in zip(fields, values, strict=True)}

    def close(self) -> None:
        self.admin.close()


def stats_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    delta = {}
    for name, (calls, usec) in after.items():
        calls_before, usec_before = before.get(name, (0, 0))
        if calls > calls_before:
            delta[name] = (calls - calls_before, usec - usec_before)
    return delta


def command_costs(delta: dict[str, tuple[int, int]], jobs: int) -> list[CommandCost]:
    """Per-job costs of a commandstats delta, the most frequent command first."""
    costs = [CommandCost(name, calls / jobs, usec / calls) for name, (calls, usec) in delta.items()]
    return sorted(costs, key=lambda cost: (-cost.calls_per_job, cost.command))


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of process `pid` so far: the sum of its live threads' run times to the
    nanosecond (/proc/<pid>/task/*/sched), else utime + stime in clock ticks."""
    precise = _threads_cpu(pid)
    return sum(precise.values()) if precise else _ticks_cpu(pid)


def _threads_cpu(pid: int) -> dict[str, float]:
    """tid -> run seconds; {} where the kernel has no sched file."""
    times: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/sched").read_text()
        except OSError:
            continue  # the thread just ended, or no sched file
        for line in text.splitlines():
            if line.startswith("se.sum_exec_runtime"):
                times[tid] = float(line.split(":")[1]) / 1000  # the file says ms
    return times


def _ticks_cpu(pid: int) -> float:
    # The command name (field 2) may hold spaces: count fields after its ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class _WorkerCpu:
    """CPU of a process between two readings: per thread to the nanosecond while no
    thread of the first reading has ended, else from the process-wide ticks (which
    keep ended threads' time)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.threads = _threads_cpu(pid)
        self.ticks = _ticks_cpu(pid)

    def since(self) -> float:
        now = _threads_cpu(self.pid)
        if self.threads and now and set(self.threads) <= set(now):
            return sum(now.values()) - sum(self.threads.values())
        return _ticks_cpu(self.pid) - self.ticks


class WorkerProcess:
    """One `python -m platform_common.jobs.worker` child, its log read on a thread;
    `env`: variables for it beyond this process's (a bench handler's settings)."""

    def __init__(
        self,
        url: str,
        agent_type: str,
        handler: str,
        concurrency: int,
        env: dict[str, str] | None = None,
    ) -> None:
        env = dict(os.environ, **(env or {}), QUEUE_REDIS_URL=url, PYTHONPATH=str(ROOT))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "platform_common.jobs.worker", "--agent-type", agent_type,
             "--handler", handler, "--concurrency", str(concurrency)],
            env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.ready = threading.Event()
        self.tail: deque[str] = deque(maxlen=20)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        # Read every line, or a worker that logs (failed attempts) blocks on the pipe.
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.tail.append(line.rstrip())
            if "worker ready" in line:
                self.ready.set()

    def log_tail(self) -> str:
        return " | ".join(self.tail)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self._watcher.join(10)  # it ends at the pipe's end, which the exit brought
        if self.process.stderr is not None:
            self.process.stderr.close()


def drain_with_worker(
    probe: RedisProbe,
    jobs: int,
    *,
    agent_type: str,
    handler: str,
    counter: str,
    concurrency: int,
    processes: int = 1,
    timeout: float = 900.0,
) -> WorkerDrain:
    """Run `processes` x `python -m platform_common.jobs.worker` with `handler` until the
    stats counter `counter` ("completed", "dead_lettered") reaches `jobs`; then stop
    them. A clear error, not a wait, if the jobs all end another way (a broken script
    fails them). Worker CPU is the sum over the processes.

    Like bench.queue_throughput.drain_with_worker, which this extends: that one knows
    only the no-op handler and the completed count, and measures no CPU."""
    stats_key = QueueKeys(agent_type, QueueSettings.from_url(probe.url).prefix).stats
    watched = sorted({counter, *_ENDED})
    polls = 0
    # Redis's readings start before the processes do: whatever it costs Redis to start
    # a worker (a few commands) is the drain's.
    redis_before, stats_before = probe.cpu_seconds(), probe.command_stats()
    workers: list[WorkerProcess] = []
    try:
        for _ in range(processes):
            workers.append(WorkerProcess(probe.url, agent_type, handler, concurrency))
        for worker in workers:
            if not worker.ready.wait(60):
                raise RuntimeError("worker did not start: " + worker.log_tail())
        cpu_readers = [_WorkerCpu(worker.process.pid) for worker in workers]
        started = time.perf_counter()
        while True:
            polls += 1
            counts = probe.counters(stats_key, watched)
            if counts[counter] >= jobs:
                break
            if sum(counts[name] for name in _ENDED) >= jobs:
                raise RuntimeError(
                    f"the workers ended all {jobs} jobs, but {counter} is {counts[counter]}: "
                    f"{counts}; a log ends: {workers[0].log_tail()}"
                )
            gone = [worker for worker in workers if worker.process.poll() is not None]
            if gone or time.perf_counter() - started > timeout:
                raise RuntimeError(
                    f"the workers did not reach {counter} = {jobs}: {counts}; "
                    + (gone or workers)[0].log_tail()
                )
            time.sleep(_POLL_SECONDS)
        seconds = time.perf_counter() - started
        spent = sum(reader.since() for reader in cpu_readers)
        redis_spent = probe.cpu_seconds() - redis_before
        delta = stats_delta(stats_before, probe.command_stats())
    finally:
        for worker in workers:
            worker.stop()
    return WorkerDrain(seconds, spent, redis_spent, _without_polls(delta, polls))


def _without_polls(delta: dict[str, tuple[int, int]], polls: int) -> dict[str, tuple[int, int]]:
    """The delta less the bench's own HMGETs (Redis counts them with the scripts' HMGETs:
    their time is taken out at the average HMGET's)."""
    calls, usec = delta.get("hmget", (0, 0))
    left = calls - polls
    if left <= 0:
        delta.pop("hmget", None)
    else:
        delta["hmget"] = (left, round(usec * left / calls))
    return delta
