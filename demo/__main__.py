"""`make demo`: start a private redis-server, show the JobStore, then run the exporter,
two workers per agent type and a producer until Ctrl-C (or --seconds), printing the
/metrics URL and a summary every few seconds. Everything it starts, it stops."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

from platform_common.jobs import JobStatus, make_job_store
from platform_common.jobs.queue import JobQueue, QueueSettings
from tests.support.redis_server import RedisServer, find_free_port

from .traffic import TASKS, make_job

AGENT_TYPES = tuple(TASKS)


async def show_job_store(redis_url: str) -> None:
    """The JobStore as an agent uses it (the migration recipe's calls)."""
    os.environ["JOB_STORE_URL"] = redis_url
    os.environ.setdefault("OTEL_SERVICE_NAME", "demo-agent")
    store = make_job_store()
    try:
        job_id = uuid.uuid4().hex
        created = await store.create(job_id, {"request": "scan"}, ttl_seconds=3600)
        print(f"  created  {job_id}  status={created.status}  version={created.version}")
        running = await store.update(job_id, status=JobStatus.RUNNING)
        print(f"  updated  {job_id}  status={running.status}  version={running.version}")
        done = await store.update(job_id, status=JobStatus.SUCCEEDED, result={"findings": 3})
        print(f"  finished {job_id}  status={done.status}  result={done.result}")
        for _ in range(3):
            await store.create(uuid.uuid4().hex, {"request": "scan"}, ttl_seconds=600)
        print(f"  list_ids -> {len(await store.list_ids(limit=10))} jobs")
    finally:
        await store.close()


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@contextlib.contextmanager
def processes(
    commands: list[list[str]], env: dict[str, str]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [subprocess.Popen(cmd, env=env, start_new_session=True) for cmd in commands]
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in started:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def produce(queue: JobQueue, seconds: float, rate: float, stop: asyncio.Event) -> None:
    rng = random.Random(7)
    started = time.monotonic()
    next_summary = started + 5
    while not stop.is_set() and (seconds <= 0 or time.monotonic() - started < seconds):
        for agent_type in AGENT_TYPES:
            await queue.enqueue(make_job(agent_type, rng))
        if time.monotonic() >= next_summary:
            next_summary += 5
            await print_summary(queue)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=len(AGENT_TYPES) / rate)


async def print_summary(queue: JobQueue) -> None:
    for agent_type in AGENT_TYPES:
        s = await queue.stats(agent_type)
        c = s.counters
        print(
            f"  {agent_type:8} queued={s.queued:<4} running={s.in_progress:<3} "
            f"retrying={s.delayed:<3} dead={s.dead:<3} enqueued={c['enqueued']:<5} "
            f"completed={c['completed']:<5} retried={c['retried']:<4} failed={c['failed']}"
        )


async def run(args: argparse.Namespace) -> None:
    with RedisServer(appendonly=True, appendfsync="everysec") as redis_server:
        print(f"redis-server (AOF on) at {redis_server.url}")
        print("JobStore:")
        await show_job_store(redis_server.url)

        port = args.port if _port_free(args.port) else find_free_port()
        env = dict(os.environ, REDIS_URL=redis_server.url, PYTHONUNBUFFERED="1")
        python = sys.executable
        commands = [[python, "-m", "platform_common.jobs_exporter", "--redis-url", redis_server.url,
                     "--port", str(port), "--host", "127.0.0.1",
                     "--agent-types", ",".join(AGENT_TYPES), "--log-level", "WARNING"]]  # fmt: skip
        for agent_type in AGENT_TYPES:
            for _ in range(args.workers):
                commands.append([python, "-m", "platform_common.jobs.worker",
                                 "--agent-type", agent_type, "--handler", "demo.handlers:research",
                                 "--concurrency", "10", "--log-level", "WARNING"])  # fmt: skip
        with processes(commands, env):
            print(
                f"\nexporter:  http://127.0.0.1:{port}/metrics   runbooks: http://127.0.0.1:{port}/runbooks/"
            )
            print(f"workers:   {args.workers} per agent type ({', '.join(AGENT_TYPES)})")
            print(
                "producer:  ordinary, slow, flaky (retried), poison (dead-lettered), invalid jobs"
            )
            print(
                "Ctrl-C stops everything.\n" if args.seconds <= 0 else f"running {args.seconds}s\n"
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            queue = await JobQueue.connect(QueueSettings.from_url(redis_server.url))
            try:
                await produce(queue, args.seconds, args.rate, stop)
                print("\nfinal:")
                await print_summary(queue)
            finally:
                await queue.aclose()
    print("stopped redis-server, exporter and workers")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument("--seconds", type=float, default=0, help="stop after N seconds (0: Ctrl-C)")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs per second, all types")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per agent type")
    parser.add_argument("--port", type=int, default=9808, help="exporter port (another if busy)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
