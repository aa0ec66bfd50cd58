"""Every use of redis-py's private API, in this one module.

redis-py offers no public way to do what these hooks do. pyproject admits only the
redis-py major the suite runs against, from the release that has all of them, and
tests/redis/test_internals.py fails, naming the hook, on a redis-py without one (HOOKS):

- `ClusterNode._connections`: a node's connections (a retired node with none open is
  forgotten, node_connections).
- `NodesManager._background_tasks`: where redis-py closes the sockets of nodes it drops
  outside initialize() (a cluster client's aclose() waits for them, background_tasks).
- `RedisCluster._determine_slot`: the slot a command is sent to (ReadOnlyScriptSlots).
- `AbstractConnection._connect`: opens the socket (AddressRotation).
- `AbstractConnection._parser`: the connection's reply parser (reply_parser).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, cast

from redis.asyncio.cluster import ClusterNode, NodesManager, RedisCluster
from redis.asyncio.connection import AbstractConnection

__all__ = [
    "HOOKS",
    "AddressRotation",
    "ReadOnlyScriptSlots",
    "ReplyParser",
    "background_tasks",
    "node_connections",
    "reply_parser",
]

HOOKS: tuple[tuple[type, str], ...] = (
    (ClusterNode, "_connections"),
    (NodesManager, "_background_tasks"),
    (RedisCluster, "_determine_slot"),
    (AbstractConnection, "_connect"),
    (AbstractConnection, "_parser"),
)
"""(redis-py class, private attribute or method) of every hook this module uses."""


def node_connections(node: ClusterNode) -> list[AbstractConnection]:
    """The node's connections, open or not."""
    return list(node._connections)


def background_tasks(nodes: NodesManager) -> tuple[asyncio.Task[Any], ...]:
    """The tasks still closing the sockets of nodes redis-py dropped (a MOVED reply after
    a failover rewrites the node cache), which could otherwise outlive the event loop."""
    return tuple(nodes._background_tasks)


class ReplyParser(Protocol):
    """What every redis-py asyncio parser (hiredis, RESP2, RESP3) offers."""

    async def read_response(self) -> Any: ...


def reply_parser(connection: AbstractConnection) -> ReplyParser:
    """The parser the connection reads its replies with: its read_response returns error
    replies instead of raising them and adds no timeout per reply."""
    return cast(ReplyParser, connection._parser)


class ReadOnlyScriptSlots(RedisCluster):
    """A cluster client that routes EVAL_RO/EVALSHA_RO by their KEYS, as redis-py does
    EVAL/EVALSHA; for the read-only variants it asks the server (COMMAND GETKEYS) before
    every call, an extra round trip per agent type per exporter scrape."""

    async def _determine_slot(self, command: str, *args: Any) -> int:
        if command.upper() in ("EVAL_RO", "EVALSHA_RO") and len(args) >= 2:
            keys = args[2 : 2 + int(args[1])]
            if keys:
                slots = {self.keyslot(key) for key in keys}
                if len(slots) == 1:
                    return slots.pop()
            # No keys or a cross-slot call: let redis-py decide (and raise) as it would.
        return await super()._determine_slot(command, *args)


class AddressRotation:
    """A connection mixin: connect to the first of several addresses that accepts,
    starting with the one that worked last."""

    def __init__(self, *, addresses: tuple[tuple[str, int], ...], **kwargs: Any) -> None:
        self._addresses = list(addresses)
        host, port = self._addresses[0]
        super().__init__(host=host, port=port, **kwargs)  # type: ignore[call-arg]

    async def _connect(self) -> None:
        error: BaseException | None = None
        for _ in range(len(self._addresses)):
            self.host, self.port = self._addresses[0]
            try:
                await super()._connect()  # type: ignore[misc]
                return
            except (OSError, TimeoutError) as exc:
                error = exc
                self._addresses.append(self._addresses.pop(0))
        assert error is not None
        raise error
