"""The queue an operator command works on, and the bounded reads no JobQueue method offers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError

from ..queue import JobQueue, QueueSettings
from ..queue.backend_errors import backend_errors
from ..redis.script import Command, pipeline_transport, run_batch, run_pipelined
from ..type_registry import MAX_AGENT_TYPES

__all__ = [
    "PAGE",
    "AgentTypes",
    "agent_types",
    "operator_queue",
    "read",
    "read_undecoded",
    "redis_now",
    "replies_undecoded",
    "score_pairs",
]

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


@dataclass(frozen=True, slots=True)
class AgentTypes:
    """The agent types a command or a page shows."""

    names: tuple[str, ...]
    """Those asked for; or every one: the configured ones (QUEUE_AGENT_TYPES), then those
    Redis has seen (its registry, as the exporter reads it), sorted."""
    unreadable: tuple[str, ...] = ()
    """Types Redis has seen, not configured here, that this Redis user may not read (an
    ACL scoped to other types): left out of `names`."""
    dropped: int = 0
    """Types left out beyond the first MAX_AGENT_TYPES."""

    def notes(self) -> list[str]:
        """What was left out, one line each (empty when nothing was)."""
        notes = []
        if self.unreadable:
            notes.append(
                "agent types this Redis user may not read, left out: " + ", ".join(self.unreadable)
            )
        if self.dropped:
            notes.append(
                f"{self.dropped:,} more agent type(s) in Redis than the {MAX_AGENT_TYPES} "
                "shown; name one to see it"
            )
        return notes


async def agent_types(queue: JobQueue, requested: Sequence[str] = ()) -> AgentTypes:
    """`requested`, each configured or seen in Redis (else ValidationError naming it and
    the known ones); or, when none is requested, every configured type and every type
    Redis has seen (a producer or worker of it registered it), as the exporter reads them
    (at most MAX_AGENT_TYPES). A discovered type whose keys this Redis user may not read
    is left out and named in `unreadable`, not a failure: a configured one it may not
    read fails as any refused read does."""
    if requested:
        for agent_type in requested:
            await queue.connection.seen_keys(agent_type)
        return AgentTypes(tuple(dict.fromkeys(requested)))
    selection = await queue.connection.discover_types()
    configured = queue.settings.agent_types
    refused = await _refused(queue, [t for t in selection.types if t not in configured])
    return AgentTypes(
        tuple(t for t in selection.types if t not in refused), tuple(refused), selection.dropped
    )


async def _refused(queue: JobQueue, discovered: Sequence[str]) -> list[str]:
    """Those of `discovered` whose queue list this Redis user may not read (one pipeline
    of LLENs; the NOPERM error replies say which)."""
    if not discovered:
        return []
    commands = [("LLEN", queue.connection.keys(t).queue) for t in discovered]
    with backend_errors(queue.settings.redis):
        replies = await run_pipelined(queue.connection.client, commands)
    refused = []
    for agent_type, reply in zip(discovered, replies, strict=True):
        if isinstance(reply, NoPermissionError):
            refused.append(agent_type)
        elif isinstance(reply, Exception):
            raise reply
    return refused


async def read(queue: JobQueue, commands: Sequence[Command]) -> list[Any]:
    """Run read commands in one pipeline (one round trip per node); an error reply raised."""
    with backend_errors(queue.settings.redis):
        replies = await run_pipelined(queue.connection.client, commands)
    return _raised(replies)  # outside backend_errors: an error reply is no outage


async def read_undecoded(queue: JobQueue, commands: Sequence[Command]) -> list[Any]:
    """read(), with every reply as Redis holds it (bytes): for values that may not be
    UTF-8 (a damaged record), which the decoding client would refuse as a whole."""
    return _raised(await replies_undecoded(queue, commands))


async def replies_undecoded(queue: JobQueue, commands: Sequence[Command]) -> list[Any]:
    """read_undecoded() with an error reply left in its place, as its exception: for a
    caller that tells some apart (a key of another type, a right this user lacks)."""
    with backend_errors(queue.settings.redis):
        return list(
            await run_batch(pipeline_transport(queue.connection.client, lambda _: True), commands)
        )


def _raised(replies: Sequence[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


async def redis_now(queue: JobQueue) -> float:
    """Redis' clock (TIME), seconds: ages are measured against the clock the scripts use."""
    seconds, micros = (await read(queue, [("TIME",)]))[0]
    return int(seconds) + int(micros) / 1_000_000


def score_pairs(reply: object) -> list[tuple[str, float]]:
    """A sorted set's (member, score) reply, RESP2 flat or RESP3 pairs, as pairs."""
    items = list(reply)  # type: ignore[call-overload]
    if items and isinstance(items[0], list | tuple):
        return [(str(m), float(s)) for m, s in items]
    return [(str(m), float(s)) for m, s in zip(items[::2], items[1::2], strict=True)]
