"""Handlers the queue tests run in worker processes, steered by the payload.

`behave` reads `constraints["behaviour"]`; every run is recorded in Redis
(RPUSH test:runs "<job_id> <pid> <attempt> <event> <nonce>") so a test can count them.
Also `python -m tests.support.queue_handlers produce ...`: a producer process for the
mixed-workload test."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from platform_common.jobs.queue import JobPayload, JobQueue, NonRetryableError, current_job
from platform_common.jobs.redis.url import RedisClient, RedisSettings

RUNS_KEY = "test:runs"


def make_job(agent_type: str = "dining", **overrides: Any) -> dict[str, Any]:
    """A valid payload of the documented shape with a fresh job_id; overrides replace fields."""
    job: dict[str, Any] = {
        "job_id": str(uuid.uuid4()),
        "session_id": "0b7e6f4a-session",
        "orchestrator_id": "orch-123",
        "agent_type": agent_type,
        "task": "Find 3 dinner reservations in Tokyo for Feb 13-17, party of 2",
        "constraints": {"cuisines": ["sushi", "kaiseki"], "max_price_per_person": 200},
        "curated_shortlist": ["sukiyabashi-jiro", "den", "kyubey"],
        "result_format": "RestaurantOption[]",
        "created_at": datetime.now(UTC).isoformat(),
        "ttl_seconds": 60,
    }
    job.update(overrides)
    return job


def behaviour(name: str, **extra: Any) -> dict[str, Any]:
    """constraints that make `behave` act as `name`."""
    return {"behaviour": name, **extra}


_client: RedisClient | None = None
_first_use = asyncio.Lock()


async def _redis() -> RedisClient:
    """The handlers' own client, made and first used by one handler alone: redis-py's
    cluster client, first used by several tasks at once, can fail one of them with
    "'NoneType' object has no attribute 'writelines'" while it connects (seen as a
    sleeper's failed first attempt on a loaded machine)."""
    global _client
    if _client is None:
        async with _first_use:
            if _client is None:
                # RedisSettings, not Redis.from_url: the URL may name a cluster.
                url = os.environ.get("QUEUE_REDIS_URL") or os.environ["REDIS_URL"]
                client = RedisSettings.from_url(url).make_client()
                await client.ping()
                _client = client
    return _client


def run_line(job_id: str, attempt: int, event: str) -> str:
    """One entry of the run log. The random tail makes each entry unique: a client that
    re-sends an RPUSH whose reply was lost (the package's clients retry a timed-out
    command) adds the same line twice, which the reader counts once; two runs of a
    handler never share a line (worker_records.run_log)."""
    return f"{job_id} {os.getpid()} {attempt} {event} {os.urandom(6).hex()}"


async def record(job_id: str, event: str) -> None:
    await (await _redis()).rpush(RUNS_KEY, run_line(job_id, current_job().attempt, event))


async def behave(job: JobPayload) -> Any:
    constraints = job.constraints
    behaviour = constraints.get("behaviour", "ok")
    await record(job.job_id, "start")
    if behaviour == "sleep":
        await asyncio.sleep(float(constraints["seconds"]))
    elif behaviour == "crash":
        os._exit(3)  # a poison pill: the whole worker process dies mid-job
    elif behaviour == "fail":
        raise RuntimeError(f"boom on attempt {current_job().attempt}")
    elif behaviour == "fail_until":
        if current_job().attempt < int(constraints["succeed_on"]):
            raise RuntimeError(f"not yet (attempt {current_job().attempt})")
    elif behaviour == "fatal":
        raise NonRetryableError("cannot be done")
    await record(job.job_id, "finish")
    return {"pid": os.getpid(), "attempt": current_job().attempt, "task": job.task}


class HandlerBaseException(BaseException):
    """A BaseException that is none of Python's own (raised by `misbehave`)."""


async def misbehave(job: JobPayload) -> Any:
    """`behave`, plus what a handler must never get away with: raising SystemExit,
    KeyboardInterrupt, CancelledError or another BaseException, and blocking the event
    loop (`time.sleep` in an async def)."""
    constraints = job.constraints
    behaviour = constraints.get("behaviour", "ok")
    raising: dict[str, BaseException] = {
        "exit": SystemExit(7),
        "interrupt": KeyboardInterrupt(),
        "cancel": asyncio.CancelledError(),
        "base": HandlerBaseException("not an Exception"),
    }
    if behaviour in raising:
        await record(job.job_id, "start")
        raise raising[behaviour]
    if behaviour == "block":
        await record(job.job_id, "start")
        time.sleep(float(constraints["seconds"]))  # noqa: ASYNC251 (blocking the loop is the point)
        await record(job.job_id, "finish")
        return {"pid": os.getpid(), "attempt": current_job().attempt}
    return await behave(job)


_sync_client: redis.Redis | redis.RedisCluster | None = None
_sync_lock = threading.Lock()


def _sync_redis() -> redis.Redis | redis.RedisCluster:
    global _sync_client
    with _sync_lock:
        if _sync_client is None:
            url = os.environ.get("QUEUE_REDIS_URL") or os.environ["REDIS_URL"]
            settings = RedisSettings.from_url(url)
            if settings.cluster:
                host, port = settings.all_addresses()[0]
                _sync_client = redis.RedisCluster(host=host, port=port, decode_responses=True)
            else:
                _sync_client = redis.Redis.from_url(url, decode_responses=True)
        return _sync_client


def behave_sync(job: JobPayload) -> Any:
    """A plain-def handler (the worker runs it in a thread): "sleep" blocks in
    time.sleep, "fail" raises; every run is recorded like `behave` records it."""
    context = current_job()
    client = _sync_redis()
    client.rpush(RUNS_KEY, run_line(job.job_id, context.attempt, "start"))
    behaviour = job.constraints.get("behaviour", "ok")
    if behaviour == "sleep":
        time.sleep(float(job.constraints["seconds"]))
    elif behaviour == "fail":
        raise RuntimeError(f"boom on attempt {context.attempt}")
    client.rpush(RUNS_KEY, run_line(job.job_id, context.attempt, "finish"))
    return {
        "pid": os.getpid(),
        "attempt": context.attempt,
        "thread": threading.current_thread().name,
    }


def with_ttl_left(job: dict[str, Any]) -> dict[str, Any]:
    """The payload of a plan entry: an entry with `ttl_left` (not a payload field) gets the
    created_at that leaves it that many seconds of its ttl_seconds now, as it is enqueued,
    however long this process took to start."""
    payload = dict(job)
    left = payload.pop("ttl_left", None)
    if left is not None:
        age = timedelta(seconds=payload["ttl_seconds"] - left)
        payload["created_at"] = (datetime.now(UTC) - age).isoformat()
    return payload


async def _produce(redis_url: str, plan: list[dict[str, Any]], batch: bool) -> None:
    queue = await JobQueue.connect(redis_url)
    try:
        if batch:
            await queue.enqueue_many([with_ttl_left(job) for job in plan])
        else:
            for job in plan:
                await queue.enqueue(with_ttl_left(job))
    finally:
        await queue.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["produce"])
    parser.add_argument("--plan", required=True, help="JSON file: a list of payloads")
    parser.add_argument("--batch", action="store_true")
    args = parser.parse_args(argv)
    with open(args.plan, encoding="utf-8") as plan_file:
        plan = json.load(plan_file)
    asyncio.run(_produce(os.environ["QUEUE_REDIS_URL"], plan, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
