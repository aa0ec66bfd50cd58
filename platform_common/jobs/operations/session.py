"""The queue an operator command works on, and the bounded reads no JobQueue method offers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..queue import JobQueue, QueueSettings
from ..queue.backend_errors import backend_errors
from ..redis.script import Command, pipeline_transport, run_batch, run_pipelined

__all__ = ["PAGE", "agent_types", "operator_queue", "read", "read_undecoded", "redis_now"]

PAGE = 500
"""Most list entries (and job hashes) one read fetches: a 100k-long list is paged."""


@asynccontextmanager
async def operator_queue(
    redis_url: str | None = None, environ: Mapping[str, str] | None = None
) -> AsyncIterator[JobQueue]:
    """A JobQueue configured as the worker is (QUEUE_* variables; `redis_url`, e.g. a
    --redis-url option, wins over QUEUE_REDIS_URL / REDIS_URL), closed on exit."""
    settings = QueueSettings.from_env(environ, redis_url=redis_url)
    # A command makes a few reads: one connection up front, not a producer's pre-warmed pool.
    queue = await JobQueue.connect(settings.with_overrides(pool_min=1))
    try:
        yield queue
    finally:
        await queue.aclose()


def agent_types(queue: JobQueue, requested: Sequence[str] = ()) -> tuple[str, ...]:
    """`requested`, each a configured agent type (else ValidationError naming it and the
    known ones), or every configured type when none is requested."""
    for agent_type in requested:
        queue.connection.known_keys(agent_type)
    return tuple(dict.fromkeys(requested)) or queue.settings.agent_types


async def read(queue: JobQueue, commands: Sequence[Command]) -> list[Any]:
    """Run read commands in one pipeline (one round trip per node); an error reply raised."""
    with backend_errors(queue.settings.redis):
        replies = await run_pipelined(queue.connection.client, commands)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


async def read_undecoded(queue: JobQueue, commands: Sequence[Command]) -> list[Any]:
    """read(), with every reply as Redis holds it (bytes): for values that may not be
    UTF-8 (a damaged record), which the decoding client would refuse as a whole."""
    with backend_errors(queue.settings.redis):
        replies = await run_batch(
            pipeline_transport(queue.connection.client, lambda _: True), commands
        )
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


async def redis_now(queue: JobQueue) -> float:
    """Redis' clock (TIME), seconds: ages are measured against the clock the scripts use."""
    seconds, micros = (await read(queue, [("TIME",)]))[0]
    return int(seconds) + int(micros) / 1_000_000
