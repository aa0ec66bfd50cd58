"""The connections of one process's queue use: the pooled client (auto-pipelined for
the hot path), dedicated connections for blocking commands and pub/sub, the health check."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from ..errors import CorruptQueueState, JobsError, ValidationError
from ..keys import QueueKeys, latency_bucket_field, queue_key_type
from ..redis.auto_pipeline import AutoPipeline
from ..redis.memory_policy import check_memory_policy
from ..redis.script import Script
from ..redis.url import RedisClient
from ..type_registry import MAX_AGENT_TYPES, Selection, registry_reads, select_from_replies
from ..validation import validate_name
from .backend_errors import CORRUPT_REPLY, backend_errors, corrupt_reply, out_of_memory
from .queue_settings import QueueSettings
from .scripts import QueueScripts

__all__ = ["QueueConnection"]


class QueueConnection:
    """A pooled client (min `pool_min` pre-warmed, max `pool_max`; past that a caller
    waits for a free connection, then gets BackendBusy), the queue scripts and the keys.

    Scripts run through an AutoPipeline: calls issued while another is in flight share
    one round trip. Blocking commands (BLMOVE) never use the pool: `blocking_client()`
    gives each blocking loop a connection of its own, whose socket timeout exceeds the
    block timeout (checked by QueueSettings)."""

    scripts = QueueScripts

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        # One pool size for the package: the Redis settings' max_connections (= pool_max).
        self.client: RedisClient = settings.redis.make_client()
        # The claim returns stored payloads: read as bytes, each decoded by the worker
        # (worker/attempt_calls.py), so one that is not UTF-8 fails only its own job.
        self._pipeline = AutoPipeline(self.client, undecoded=[self.scripts.claim])
        self.registered_types: set[str] = set()
        self.seen_types: set[str] = set()
        """Agent types not configured here that the registry showed this connection
        (seen_keys, discover_types): known_keys accepts them too."""
        # Batches that run on after their caller was cancelled: closing waits for them,
        # or one would reconnect after the close and leave its socket to the GC.
        self._detached: set[asyncio.Future[Any]] = set()

    @classmethod
    async def open(cls, settings: QueueSettings) -> QueueConnection:
        """Connect, pre-warm `pool_min` connections (Redis must be reachable) and check
        the eviction policy: producers and workers both open here, so each logs a
        WARNING at start when Redis could evict the queue's keys."""
        connection = cls(settings)
        try:
            await connection.prewarm()
            await check_memory_policy(connection.client, settings.redis)
        except BaseException:
            await connection.aclose()
            raise
        return connection

    def keys(self, agent_type: str) -> QueueKeys:
        return _keys(agent_type, self.settings.prefix)

    def known_keys(self, agent_type: str) -> QueueKeys:
        """The keys of a configured agent type (or of one seen in the registry, see
        seen_keys); any other name is refused with the ValidationError text enqueue gives
        (a misspelt type is an error, never an empty answer)."""
        _check_name(agent_type)
        if agent_type not in self.settings.agent_types and agent_type not in self.seen_types:
            known = ", ".join(sorted(self.settings.agent_types))
            raise ValidationError(
                "agent_type", f"unknown agent type {agent_type!r}; known: {known}"
            )
        return self.keys(agent_type)

    async def seen_keys(self, agent_type: str) -> QueueKeys:
        """known_keys, and the keys of an agent type that is not configured here but that
        Redis has seen: the registry (keys.py, `<prefix>:types`) holds it, so a producer
        or a worker of it ran (what the exporter exports). A name neither configured nor
        ever registered is a ValidationError that says so and names the known ones: what
        the operator tools ask before they read a type."""
        _check_name(agent_type)
        if agent_type in self.settings.agent_types or agent_type in self.seen_types:
            return self.keys(agent_type)
        types_key = QueueKeys.types_key(self.settings.prefix)
        with backend_errors(self.settings.redis):
            registered = await self.client.sismember(types_key, agent_type)  # type: ignore[misc]
        if registered and _valid(agent_type):
            self.seen_types.add(agent_type)
            return self.keys(agent_type)
        known = ", ".join(sorted((await self.discover_types()).types))
        raise ValidationError(
            "agent_type",
            f"unknown agent type {agent_type!r}: not configured and never seen in Redis "
            f"({types_key}); known: {known}",
        )

    async def discover_types(self, max_agent_types: int = MAX_AGENT_TYPES) -> Selection:
        """The agent types configured here, then those the registry holds (sorted), at
        most `max_agent_types`, read as the exporter reads them (type_registry); known_keys
        accepts each from now on."""
        with backend_errors(self.settings.redis):
            scard, sscan = await self.execute_many(
                registry_reads(self.settings.prefix, max_agent_types)
            )
            for reply in (scard, sscan):
                if isinstance(reply, Exception):
                    raise reply
        selection = select_from_replies(
            self.settings.agent_types, scard, sscan, max_agent_types=max_agent_types
        )
        self.seen_types.update(t for t in selection.types if t not in self.settings.agent_types)
        return selection

    async def prewarm(self) -> None:
        """Open `pool_min` connections now, so the first jobs do not pay for connecting.

        redis-py has no minimum pool size: concurrent PINGs each hold their own
        connection until answered, so the pool ends with at least that many open."""
        await asyncio.gather(*(self._ping() for _ in range(self.settings.pool_min)))

    async def run_script(
        self, script: Script, keys: Sequence[str | bytes], args: list[Any], *, eager: bool = False
    ) -> Any:
        """Run a queue script (auto-pipelined with concurrent calls); errors raised, a
        refusal as the package's error (CorruptQueueState, BackendOutOfMemory).
        `eager`: sent at once when the pipeline is idle (AutoPipeline.execute)."""
        try:
            return await self._pipeline.execute(script.call(keys, args), eager=eager)
        except ResponseError as exc:
            named = [
                k if isinstance(k, str) else k.decode("utf-8", "backslashreplace") for k in keys
            ]
            raise await self.refusal(exc, named) from exc

    async def run_script_many(
        self, script: Script, calls: Iterable[tuple[list[str], list[Any]]]
    ) -> list[Any]:
        """Run `script` once per (keys, args) in one batch; each reply or error in
        place (NOSCRIPT replies, which did not run, run again by source).

        Once sent, the batch runs to the end even if the caller is cancelled: a batch is
        never left cut at a point the caller did not choose (its replies are then
        discarded)."""
        calls = list(calls)
        task = asyncio.ensure_future(
            self._pipeline.execute_many([script.call(keys, args) for keys, args in calls])
        )
        # If the caller is gone, the outcome has no reader: mark it read (no warning).
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._detached.add(task)
        task.add_done_callback(self._detached.discard)
        replies = list(await asyncio.shield(task))
        for index, reply in enumerate(replies):
            if isinstance(reply, ResponseError):
                replies[index] = await self.refusal(reply, calls[index][0])
        return replies

    async def refusal(self, exc: ResponseError, keys: list[str]) -> BaseException:
        """The package's error for an error reply of a script or a plain command on
        `keys` (else the reply itself). Redis names no key in WRONGTYPE: the keys are
        looked at (TYPE, one round trip, on this rare path only) to name the one the
        queue keeps another type at."""
        if isinstance(exc, JobsError):
            return exc
        text = str(exc)
        if text.startswith(CORRUPT_REPLY):
            return corrupt_reply(text, keys)
        if isinstance(exc, OutOfMemoryError):  # redis-py strips the "OOM " of the reply
            return out_of_memory(self.settings.redis, exc)
        if not text.startswith("WRONGTYPE "):
            return exc
        found = await self.execute_many([("TYPE", key) for key in keys])
        for key, kind in zip(keys, found, strict=True):
            expected = queue_key_type(key, self.settings.prefix)
            if expected and isinstance(kind, str) and kind not in (expected, "none"):
                return CorruptQueueState(key, f"holds a {kind}, where the queue keeps a {expected}")
        return CorruptQueueState("", "a key holds another type than the queue keeps there")

    async def execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Run plain commands back to back in one batch; errors are returned in place."""
        return await self._pipeline.execute_many(commands)

    async def register_type(self, agent_type: str) -> None:
        """Once per process and agent type: SADD it to the discovery set (for the
        exporter) and create every latency bucket field of its stats hash with 0, so
        the stored histogram always holds the full bucket set this queue uses (the
        complete script only creates a bucket when an observation lands in it)."""
        if agent_type not in self.registered_types:
            stats = self.keys(agent_type).stats
            bounds = (*self.settings.latency_buckets, float("inf"))
            await self._check_buckets(stats, [latency_bucket_field(bound) for bound in bounds])
            await self.client.sadd(QueueKeys.types_key(self.settings.prefix), agent_type)  # type: ignore[misc]
            # HINCRBY by 0 creates a missing field with 0 and leaves a count untouched.
            replies = await self.execute_many(
                [("HINCRBY", stats, latency_bucket_field(bound), 0) for bound in bounds]
            )
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            self.registered_types.add(agent_type)

    async def _check_buckets(self, stats: str, fields: list[str]) -> None:
        """CorruptQueueState, before anything is written, for a stats key of another type
        or a bucket field that is not an integer (HINCRBY by 0 would fail on it)."""
        kind, values = await self.execute_many([("TYPE", stats), ("HMGET", stats, *fields)])
        if isinstance(kind, Exception):
            raise kind
        if kind not in ("hash", "none"):
            raise CorruptQueueState(stats, f"holds a {kind}, where the queue keeps a hash")
        if isinstance(values, Exception):
            raise values
        for field, value in zip(fields, values, strict=True):
            if value is not None and not _INTEGER.fullmatch(value):
                raise CorruptQueueState(stats, f"field {field} is not an integer: {value!r:.40}")

    def blocking_client(self) -> RedisClient:
        """A client with its own single connection, for BLMOVE and the like."""
        return self.settings.redis.make_client(max_connections=1)

    def subscriber_client(self) -> aioredis.Redis:
        """A single-connection client for pub/sub. On a cluster any one node will do
        (PUBLISH reaches every node): it connects to whichever URL address answers, so
        the subscriber survives the loss of the node it was on."""
        return self.settings.redis.make_node_client(max_connections=1)

    async def ping(self) -> bool:
        """True when Redis answers PING through the pool (the health check a service's
        lifespan runs)."""
        try:
            return await self._ping()
        except (RedisError, OSError):
            return False

    async def _ping(self) -> bool:
        return bool(await self.client.execute_command("PING"))

    async def aclose(self) -> None:
        if self._detached:
            await asyncio.wait(self._detached, timeout=5)
        await self._pipeline.aclose()
        await self.client.aclose()


_INTEGER = re.compile(r"-?[0-9]{1,18}")
"""A counter as HINCRBY keeps one (18 digits: far from overflowing 64 bits)."""


@lru_cache(maxsize=256)
def _keys(agent_type: str, prefix: str) -> QueueKeys:
    return QueueKeys(agent_type, prefix)


def _valid(agent_type: str) -> bool:
    """A name the queue could have registered (a hand-added member may not be one)."""
    try:
        validate_name(agent_type, "agent_type")
    except ValidationError:
        return False
    return True


def _check_name(agent_type: object) -> None:
    """A name that is not even a string is no agent type (and no set member to look up)."""
    if not isinstance(agent_type, str):
        raise ValidationError("agent_type", f"unknown agent type {agent_type!r}: not a string")
