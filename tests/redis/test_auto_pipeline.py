"""The auto-pipeline's eager path against a real Redis: a lone command sent from its
caller's task shares the held connection with nothing, what is issued meanwhile goes out
next with every reply in its place, and a cancelled eager caller leaves a working
pipeline. A blocking pop holds the eager command in flight until another client pushes:
no timing decides these tests."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from platform_common.jobs.redis.auto_pipeline import AutoPipeline
from platform_common.jobs.redis.url import RedisClient, RedisSettings
from tests.support.queue_runtime import eventually


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[AutoPipeline, RedisClient]]:
    """An auto-pipeline, and a second client to watch and to wake it."""
    settings = RedisSettings.from_url(redis_url)
    client, other = settings.make_client(), settings.make_client()
    pipeline = AutoPipeline(client)
    try:
        yield pipeline, other
    finally:
        await pipeline.aclose()
        await client.aclose()
        await other.aclose()


async def blocked(other: RedisClient) -> bool:
    info = await other.info("clients")
    return int(info["blocked_clients"]) == 1


async def test_what_is_issued_during_an_eager_command_goes_next_each_reply_in_place(
    clients: tuple[AutoPipeline, RedisClient],
) -> None:
    pipeline, other = clients
    await other.mset({f"{{t}}:v{n}": f"value-{n}" for n in range(20)})
    eager = asyncio.create_task(pipeline.execute(("BLPOP", "{t}:wake", 0), eager=True))
    await eventually(lambda: blocked(other))
    # Issued while the eager pop holds the connection: one batch sent after it, and a
    # second eager call finds the pipeline busy and queues like the rest.
    queued = [asyncio.create_task(pipeline.execute(("GET", f"{{t}}:v{n}"))) for n in range(10)]
    queued += [
        asyncio.create_task(pipeline.execute(("GET", f"{{t}}:v{n}"), eager=True))
        for n in range(10, 20)
    ]
    await asyncio.sleep(0)
    assert not any(task.done() for task in queued)
    await other.lpush("{t}:wake", "go")
    assert await eager == ["{t}:wake", "go"]
    assert await asyncio.gather(*queued) == [f"value-{n}" for n in range(20)]


async def test_a_cancelled_eager_command_leaves_the_pipeline_working(
    clients: tuple[AutoPipeline, RedisClient],
) -> None:
    pipeline, other = clients
    await other.set("{t}:k", "v")
    eager = asyncio.create_task(pipeline.execute(("BLPOP", "{t}:never", 0), eager=True))
    await eventually(lambda: blocked(other))
    waiting = asyncio.create_task(pipeline.execute(("GET", "{t}:k")))
    await asyncio.sleep(0)
    eager.cancel()
    with pytest.raises(asyncio.CancelledError):
        await eager
    # The cut round trip dropped the connection; what waited goes out on a new one.
    assert await waiting == "v"
    assert await pipeline.execute(("GET", "{t}:k"), eager=True) == "v"
    assert await pipeline.execute_many([("GET", "{t}:k"), ("GET", "{t}:none")]) == ["v", None]


async def test_an_eager_error_reply_is_raised_and_the_next_command_runs(
    clients: tuple[AutoPipeline, RedisClient],
) -> None:
    pipeline, other = clients
    await other.set("{t}:s", "text")
    with pytest.raises(Exception, match="WRONGTYPE"):
        await pipeline.execute(("LPUSH", "{t}:s", "x"), eager=True)
    assert await pipeline.execute(("GET", "{t}:s"), eager=True) == "text"


async def test_eager_and_batched_commands_interleaved_each_get_their_own_reply(
    clients: tuple[AutoPipeline, RedisClient],
) -> None:
    """Callers mixing eager and batched commands, each yielding a varying number of
    turns: a batch sent while an eager command is on the wire (or the reverse) would
    hand one caller another's reply."""
    pipeline, other = clients
    await other.mset({f"{{t}}:m{n}": f"m-{n}" for n in range(40)})
    rng = random.Random(7)
    plans = [[(rng.random() < 0.5, rng.randrange(3)) for _ in range(40)] for _ in range(40)]

    async def caller(n: int, plan: list[tuple[bool, int]]) -> list[str]:
        replies = []
        for eager, turns in plan:
            for _ in range(turns):
                await asyncio.sleep(0)
            replies.append(await pipeline.execute(("GET", f"{{t}}:m{n}"), eager=eager))
        return replies

    got = await asyncio.gather(*(caller(n, plan) for n, plan in enumerate(plans)))
    assert got == [[f"m-{n}"] * 40 for n in range(40)]


async def test_a_batch_waits_while_an_eager_command_issued_between_batches_is_on_the_wire(
    clients: tuple[AutoPipeline, RedisClient],
) -> None:
    """Two callers answered by one batch: the first sends an eager pop at once (the
    flusher is idle, between batches), the second queues a GET. The flusher, resuming,
    must leave the connection to the pop; the GET goes after it, its reply its own."""
    pipeline, other = clients
    await other.set("{t}:g", "mine")
    woken = asyncio.Event()

    async def first() -> Any:
        await pipeline.execute(("PING",))
        return await pipeline.execute(("BLPOP", "{t}:go", 0), eager=True)

    async def second() -> Any:
        await pipeline.execute(("PING",))
        woken.set()
        return await pipeline.execute(("GET", "{t}:g"))

    popped = asyncio.create_task(first())
    got = asyncio.create_task(second())
    await woken.wait()
    await eventually(lambda: blocked(other))
    assert not got.done()  # it waits for the pop, on the one connection
    await other.lpush("{t}:go", "now")
    assert await popped == ["{t}:go", "now"]
    assert await got == "mine"


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "batched"])
async def test_a_round_trip_past_the_socket_timeout_raises_a_timeout_and_the_pipeline_recovers(
    redis_url: str, eager: bool
) -> None:
    """A reply that never comes (a pop on an empty list stands in for a stalled Redis):
    the round trip is cut after socket_timeout, re-sent (RETRIES), then raised as a
    Redis TimeoutError; the caller's task carries no cancel of ours, and the next
    command runs on a new connection. Quick round trips first: the one timer that
    watches every round trip must re-arm for the one that stalls."""
    settings = RedisSettings.from_url(f"{redis_url}?socket_timeout=150ms")
    client = settings.make_client()
    pipeline = AutoPipeline(client)
    try:
        for n in range(50):
            assert await pipeline.execute(("ECHO", f"e{n}"), eager=eager) == f"e{n}"
        with pytest.raises(RedisTimeoutError, match=r"no reply from Redis within 0\.15 s"):
            await pipeline.execute(("BLPOP", "{t}:never", 0), eager=eager)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        assert await pipeline.execute(("ECHO", "after"), eager=eager) == "after"
    finally:
        await pipeline.aclose()
        await client.aclose()


async def test_a_caller_cancelled_as_its_round_trip_times_out_stays_cancelled(
    redis_url: str,
) -> None:
    """Both in one turn of the loop: the caller is cancelled from outside and the reply
    deadline has passed (the loop was blocked past it). The caller's cancel must win: a
    timeout would swallow it, and the round trip would be re-sent."""
    settings = RedisSettings.from_url(f"{redis_url}?socket_timeout=100ms")
    client, other = settings.make_client(), settings.make_client()
    pipeline = AutoPipeline(client)
    try:
        caller = asyncio.create_task(pipeline.execute(("BLPOP", "{t}:never", 0), eager=True))
        await eventually(lambda: blocked(other))
        time.sleep(0.15)  # noqa: ASYNC251 (a blocked loop: the deadline passes, no timer runs)
        # This task resumes first in the next turn and cancels the caller; the overdue
        # timer runs right after, in the same turn, and cancels it too.
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert await pipeline.execute(("ECHO", "after"), eager=True) == "after"
    finally:
        await pipeline.aclose()
        await client.aclose()
        await other.aclose()
