"""The connections of one process's queue use: a pre-warmed pool, plus dedicated
connections for blocking commands, and the health check."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import NoScriptError, RedisError, ResponseError

from ..keys import QueueKeys, latency_bucket_field
from ..redis.url import RedisClient
from .lane import CommandLane
from .scripts import QueueScript, QueueScripts, run_pipelined
from .settings import QueueSettings

__all__ = ["QueueConnection"]


class QueueConnection:
    """A pooled client (min `pool_min` pre-warmed, max `pool_max`, callers wait for a
    free connection rather than fail), the queue scripts bound to it, and the keys.

    Blocking commands (BLMOVE) never use this pool: `blocking_client()` gives each
    blocking loop a connection of its own, whose socket timeout exceeds the block
    timeout (checked by QueueSettings)."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        self.client: RedisClient = _pooled_client(settings)
        self.scripts = QueueScripts(self.client)
        # The hot path (enqueue, claim, complete) runs on a held connection; on a
        # cluster each slot lives on its own node, so there it uses the client.
        self.lane: CommandLane | None = (
            CommandLane(self.client) if isinstance(self.client, aioredis.Redis) else None
        )
        self.registered_types: set[str] = set()

    @classmethod
    async def open(cls, settings: QueueSettings) -> QueueConnection:
        """Connect and pre-warm `pool_min` connections (Redis must be reachable)."""
        connection = cls(settings)
        try:
            await connection.prewarm()
        except BaseException:
            await connection.aclose()
            raise
        return connection

    def keys(self, agent_type: str) -> QueueKeys:
        return _keys(agent_type, self.settings.prefix)

    async def prewarm(self) -> None:
        """Open `pool_min` connections now, so the first jobs do not pay for connecting.

        redis-py has no minimum pool size: concurrent PINGs each hold their own
        connection until answered, so the pool ends with at least that many open."""
        await asyncio.gather(*(self._ping() for _ in range(self.settings.pool_min)))

    async def run_script(self, script: QueueScript, keys: list[str], args: list[Any]) -> Any:
        """Run a queue script on the lane (or the client where there is no lane)."""
        if self.lane is not None:
            return await self.lane.run_script(script, keys, args)
        return await script(keys, args)

    async def run_script_many(
        self, script: QueueScript, calls: Iterable[tuple[list[str], list[Any]]]
    ) -> list[Any]:
        """Run `script` once per (keys, args); each reply or error in place, NOSCRIPT
        replies (the call did not run) re-run.

        On the lane each call is sent as soon as `calls` (a generator, for a big batch)
        has built it, so building and packing the next one overlaps Redis running this
        one. Once the first call is out, the rest are sent even if the caller is
        cancelled: a batch is never left cut at a point the caller did not choose (its
        replies are then discarded). Without a lane (a cluster) the calls go in one
        pipeline, likewise run to the end."""
        task = asyncio.ensure_future(
            self._stream(self.lane, script, iter(calls))
            if self.lane is not None
            else self._pipelined(script, calls)
        )
        # If the caller is gone, the outcome has no reader: mark it read (no warning).
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return await asyncio.shield(task)

    async def _pipelined(
        self, script: QueueScript, calls: Iterable[tuple[list[str], list[Any]]]
    ) -> list[Any]:
        return await run_pipelined(self.client, script, list(calls))

    async def _stream(
        self,
        lane: CommandLane,
        script: QueueScript,
        calls: Iterator[tuple[list[str], list[Any]]],
    ) -> list[Any]:
        made: list[tuple[list[str], list[Any]]] = []
        sent: list[asyncio.Future[list[Any]]] = []
        sha: str | None = None
        for keys, args in calls:
            if sha is None:
                sha = await script.digest(keys)
            made.append((keys, args))
            command = ("EVALSHA", sha, len(keys), *keys, *args)
            sent.append(asyncio.ensure_future(lane.execute_many([command])))
            # One turn of the loop: the lane writes this call (and reads finished
            # replies) before the next call is built.
            await asyncio.sleep(0)
        outcomes = await asyncio.gather(*sent, return_exceptions=True)
        replies: list[Any] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # the connection failed past the lane's retries
            replies.append(outcome[0])
        return await self._rerun_unloaded(script, made, replies)

    async def _rerun_unloaded(
        self,
        script: QueueScript,
        calls: Sequence[tuple[list[str], list[Any]]],
        replies: list[Any],
    ) -> list[Any]:
        """Re-run the calls answered NOSCRIPT (flush, restart, failover: the call did
        not run, so running it now is safe), each reply or error in its place."""
        if any(isinstance(reply, NoScriptError) for reply in replies):
            script.forget()
            for index, reply in enumerate(replies):
                if isinstance(reply, NoScriptError):
                    try:
                        replies[index] = await self.run_script(script, *calls[index])
                    except ResponseError as exc:
                        replies[index] = exc
        return replies

    async def execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Run plain commands back to back; errors are returned in place."""
        if self.lane is not None:
            return await self.lane.execute_many(commands)
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))

    async def register_type(self, agent_type: str) -> None:
        """Once per process and agent type: SADD it to the discovery set (for the
        exporter) and create every latency bucket field of its stats hash with 0, so
        the stored histogram always holds the full bucket set this queue uses (the
        complete script only creates a bucket when an observation lands in it)."""
        if agent_type not in self.registered_types:
            await self.client.sadd(QueueKeys.types_key(self.settings.prefix), agent_type)  # type: ignore[misc]
            stats = self.keys(agent_type).stats
            bounds = (*self.settings.latency_buckets, float("inf"))
            # HINCRBY by 0 creates a missing field with 0 and leaves a count untouched.
            replies = await self.execute_many(
                [("HINCRBY", stats, latency_bucket_field(bound), 0) for bound in bounds]
            )
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            self.registered_types.add(agent_type)

    def blocking_client(self) -> RedisClient:
        """A client with its own single connection, for BLMOVE and the like."""
        return self.settings.redis.make_client(max_connections=1, retry=async_retry())

    def subscriber_client(self) -> aioredis.Redis:
        """A single-connection client for pub/sub. On a cluster any one node will do
        (PUBLISH reaches every node): it connects to whichever URL address answers, so
        the subscriber survives the loss of the node it was on."""
        return self.settings.redis.make_node_client(max_connections=1, retry=async_retry())

    async def ping(self) -> bool:
        """True when Redis answers PING through the pool (the spec's health check)."""
        try:
            return await self._ping()
        except (RedisError, OSError):
            return False

    async def _ping(self) -> bool:
        return bool(await self.client.execute_command("PING"))

    async def aclose(self) -> None:
        if self.lane is not None:
            await self.lane.aclose()
        await self.client.aclose()


def async_retry() -> AsyncRetry:
    """Reconnect and retry a command up to 3 times with backoff on a dropped connection.

    It must be redis.asyncio's Retry: the synchronous one that client_kwargs() carries
    never awaits the command inside its loop, so an asyncio client given it neither
    retries nor reconnects (a killed pub/sub connection then stays dead)."""
    return AsyncRetry(ExponentialBackoff(cap=2.0, base=0.05), retries=3)


def _pooled_client(settings: QueueSettings) -> RedisClient:
    redis_settings = settings.redis
    if redis_settings.cluster or redis_settings.sentinel_service is not None:
        # Cluster and sentinel clients keep their own per-node pools.
        return redis_settings.make_client(max_connections=settings.pool_max, retry=async_retry())
    kwargs = redis_settings.client_kwargs()
    kwargs.pop("max_connections", None)
    kwargs["retry"] = async_retry()
    if kwargs.pop("ssl", False):  # a pool takes the TLS connection class, not ssl=True
        kwargs["connection_class"] = aioredis.SSLConnection
    # Past pool_max, a caller waits (up to the socket timeout) instead of failing.
    pool = aioredis.BlockingConnectionPool(
        max_connections=settings.pool_max, timeout=redis_settings.socket_timeout, **kwargs
    )
    return aioredis.Redis.from_pool(pool)


@lru_cache(maxsize=256)
def _keys(agent_type: str, prefix: str) -> QueueKeys:
    return QueueKeys(agent_type, prefix)
