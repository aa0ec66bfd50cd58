"""Redis's memory limit and eviction policy, read with INFO memory: the queue needs noeviction.

Any other `maxmemory-policy` lets Redis delete keys when memory runs short: queued jobs,
their records, results and the stats counters vanish without an error to anyone. INFO,
not CONFIG GET, because managed Redis services often refuse CONFIG; INFO memory carries
`used_memory`, `maxmemory` and `maxmemory_policy`. On a cluster every primary is read:
each node applies its own policy to its own slots.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from .url import RedisClient, RedisSettings

__all__ = [
    "SAFE_POLICY",
    "UNREADABLE",
    "MemoryInfo",
    "check_memory_policy",
    "describe_error",
    "parse_memory_info",
    "read_memory_info",
    "server_name",
    "warn_unchecked",
    "warn_unsafe",
]

SAFE_POLICY = "noeviction"
"""The one policy under which Redis refuses writes (OOM) rather than delete keys."""

log = logging.getLogger("platform_common.jobs.redis.memory_policy")


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """One Redis node's memory, as INFO memory reports it."""

    used_bytes: int
    """`used_memory`: bytes allocated by Redis."""
    max_bytes: int
    """`maxmemory`: the limit in bytes; 0 means none."""
    policy: str
    """`maxmemory_policy`, e.g. noeviction, allkeys-lru, volatile-ttl."""

    @property
    def can_evict(self) -> bool:
        """Whether the policy deletes keys under memory pressure. Judged by the policy
        alone: with maxmemory 0 it is dormant, but a `CONFIG SET maxmemory` (or a
        managed service's default limit) arms it without a restart of ours."""
        return self.policy != SAFE_POLICY


def parse_memory_info(reply: object) -> MemoryInfo:
    """INFO memory's reply (redis-py's dict, or the raw text) -> MemoryInfo; ValueError
    naming the field when one is missing or malformed."""
    fields: Mapping[str, object]
    if isinstance(reply, Mapping):
        fields = reply
    elif isinstance(reply, str | bytes):
        text = reply.decode() if isinstance(reply, bytes) else reply
        pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {name.strip(): value.strip() for name, value in pairs}
    else:
        raise ValueError(f"INFO memory reply is a {type(reply).__name__}, not a mapping")
    return MemoryInfo(
        used_bytes=_bytes(fields, "used_memory"),
        max_bytes=_bytes(fields, "maxmemory"),
        policy=_policy(fields),
    )


def _bytes(fields: Mapping[str, object], name: str) -> int:
    raw = fields.get(name)
    text = str(raw).strip()
    if raw is None or not text.isdigit():
        raise ValueError(f"INFO memory field {name} is {raw!r}, not a byte count")
    return int(text)


def _policy(fields: Mapping[str, object]) -> str:
    raw = fields.get("maxmemory_policy")
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"INFO memory field maxmemory_policy is {raw!r}")
    return raw.strip()


def server_name(settings: RedisSettings) -> str:
    """How logs and metrics name a non-cluster server: host:port, or the sentinel
    service name (never a password)."""
    if settings.sentinel_service is not None:
        return f"sentinel service {settings.sentinel_service}"
    return f"{settings.host}:{settings.port}"


async def read_memory_info(client: RedisClient, name: str) -> dict[str, MemoryInfo]:
    """INFO memory of every primary, by node name (`host:port`); `name` names the one
    server of a non-cluster client. Redis errors (NOPERM included) propagate; a reply
    that does not parse raises ValueError."""
    if not isinstance(client, RedisCluster):
        reply = await client.execute_command("INFO", "memory")  # type: ignore[no-untyped-call]
        return {name: parse_memory_info(reply)}
    replies = await client.execute_command("INFO", "memory", target_nodes=RedisCluster.PRIMARIES)
    if isinstance(replies, Mapping) and "maxmemory_policy" in replies:
        # One primary: redis-py hands back its reply, not a mapping of one node.
        [primary] = client.get_primaries()
        replies = {primary.name: replies}
    if not isinstance(replies, Mapping):
        raise ValueError(f"INFO memory of the primaries is a {type(replies).__name__}")
    return {str(node): parse_memory_info(reply) for node, reply in sorted(replies.items())}


async def check_memory_policy(
    client: RedisClient, settings: RedisSettings, logger: logging.Logger = log
) -> dict[str, MemoryInfo] | None:
    """Read every primary's policy and log one WARNING per node that can evict; when
    INFO is refused (an ACL without +info, a managed service) or fails, one line saying
    so. Never raises: the check informs, it does not stop a process from starting.
    The nodes' MemoryInfo, or None when they could not be read."""
    try:
        nodes = await read_memory_info(client, server_name(settings))
    except UNREADABLE as exc:
        warn_unchecked(settings, describe_error(exc), logger)
        return None
    warn_unsafe(nodes, logger)
    return nodes


UNREADABLE: tuple[type[BaseException], ...] = (
    RedisError, OSError, RedisClusterException, ValueError,
)  # fmt: skip
"""What reading INFO memory may raise: refused (NOPERM), unreachable, or unparsable."""


def warn_unsafe(nodes: Mapping[str, MemoryInfo], logger: logging.Logger = log) -> None:
    """One WARNING per node whose policy can evict, naming it (host:port) and the policy."""
    for node, info in nodes.items():
        if info.can_evict:
            logger.warning(
                "Redis at %s has maxmemory-policy %s (maxmemory %d bytes, %d used): it can "
                "evict queued jobs, results and counters without an error; set "
                "maxmemory-policy %s",
                node, info.policy, info.max_bytes, info.used_bytes, SAFE_POLICY,
                extra={"redis": node, "maxmemory_policy": info.policy},
            )  # fmt: skip


def warn_unchecked(settings: RedisSettings, reason: str, logger: logging.Logger = log) -> None:
    """The one line saying the policy could not be read, and `reason` (the error)."""
    where = settings.redacted_url()
    logger.warning(
        "could not check the maxmemory-policy of Redis at %s (%s); it must be %s, or "
        "Redis may evict queued jobs, results and counters",
        where, reason, SAFE_POLICY,
        extra={"redis": where, "error": reason},
    )  # fmt: skip


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
