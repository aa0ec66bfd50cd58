"""The Redis client and connection classes RedisSettings builds, each fixing one way
redis-py's own misbehaves for us: a cluster client that routes read-only scripts and
closes every socket, connections that rotate over several addresses (a cluster
subscriber), and sentinel connections that follow the master across a failover."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.asyncio.sentinel import Sentinel, SentinelManagedConnection

from .internals import AddressRotation, ReadOnlyScriptSlots, background_tasks, node_connections
from .pool import ConnectionGate

__all__ = [
    "AnyNodeConnection",
    "AnyNodeSSLConnection",
    "ClusterClient",
    "FastConnection",
    "FastSSLConnection",
    "MasterConnection",
    "MasterSSLConnection",
    "SentinelMasterClient",
]


_RETIRED_KEPT = 64
"""Retired node objects a ClusterClient keeps for aclose() before it forgets idle ones."""


class ClusterClient(ReadOnlyScriptSlots):
    """RedisCluster with three fixes the package relies on.

    - A full pool waits: redis-py's per-node pools raise MaxConnectionsError at once;
      here every command and pipeline first passes a ConnectionGate of
      `max_connections` (each operation holds at most one connection per node), so a
      caller waits up to `pool_timeout`, then gets BackendBusy.
    - EVAL_RO/EVALSHA_RO are routed by their KEYS (ReadOnlyScriptSlots).
    - `aclose()` closes every connection, always. redis-py's does nothing while a
      re-initialisation is pending (after any connection error, e.g. a failover); it
      closes only the node cache, while after a re-initialisation commands run on the
      slot map's own node objects; and it forgets nodes that left the topology. Each
      of these leaked sockets after a failover.
    """

    def __init__(self, *args: Any, pool_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._retired: list[ClusterNode] = []
        self.gate = ConnectionGate(kwargs.get("max_connections", 2**31), pool_timeout)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.gate.hold():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused by redis-py
        return GatedClusterPipeline(self, transaction)  # type: ignore[abstract]

    async def initialize(self) -> ClusterClient:
        before = self._known_nodes()
        try:
            await super().initialize()
        finally:
            after = self._known_nodes()
            self._retire(node for key, node in before.items() if key not in after)
        return self

    def _retire(self, nodes: Iterable[ClusterNode]) -> None:
        """Keep `nodes` (no longer in the topology) for aclose()."""
        retired = {id(node): node for node in self._retired}
        retired.update((id(node), node) for node in nodes)
        if len(retired) > _RETIRED_KEPT:
            # Only a long run of failovers gets here: forget the nodes with no socket now.
            # Below the bound every retired node is kept until aclose(), since a
            # connection still being opened on one when it retires opens afterwards.
            retired = {k: n for k, n in retired.items() if _has_open_connection(n)}
        self._retired = list(retired.values())

    def _known_nodes(self) -> dict[int, ClusterNode]:
        """Every node object the client can reach, by identity: the node cache, the
        startup nodes and the slot map (which, after a re-initialisation, holds node
        objects of its own that the node cache does not)."""
        manager = self.nodes_manager
        nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
        for slot_nodes in manager.slots_cache.values():
            nodes += slot_nodes
        return {id(node): node for node in nodes}

    async def aclose(self) -> None:
        await super().aclose()
        # Then every node we know of ourselves (see the class docstring).
        nodes = [*self._known_nodes().values(), *self._retired]
        self._retired = []
        # Nodes redis-py dropped itself are being closed in tasks of its own: wait for them.
        await asyncio.gather(*background_tasks(self.nodes_manager), return_exceptions=True)
        await asyncio.gather(*(node.disconnect() for node in nodes), return_exceptions=True)


class GatedClusterPipeline(ClusterPipeline):
    """A cluster pipeline that passes its client's ConnectionGate to execute."""

    def __init__(self, client: ClusterClient, transaction: Any | None = None) -> None:
        super().__init__(client, transaction)
        self._gated_client = client

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        async with self._gated_client.gate.hold():
            return await super().execute(raise_on_error, allow_redirections)


def _has_open_connection(node: ClusterNode) -> bool:
    return any(connection.is_connected for connection in node_connections(node))


class _HiredisPacking:
    """Packs commands with hiredis (C) instead of redis-py's Python packer.

    redis-py's asyncio connection always packs in Python: for a queue script call with
    its ~40 arguments that cost more than the round trip itself. Anything hiredis
    refuses (a bool, None) goes to redis-py's packer, which raises its usual DataError."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return [self._pack(args)]

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> list[bytes]:
        # Each command as the tuple it usually is already: no copy on the hot path.
        return [b"".join([self._pack(c if type(c) is tuple else tuple(c)) for c in commands])]

    def _pack(self, args: tuple[Any, ...]) -> bytes:
        name = args[0]
        if isinstance(name, str) and " " in name:
            # A command name with a space ('CLIENT SETNAME') is several arguments.
            args = (*name.encode().split(), *args[1:])
        try:
            packed: bytes = hiredis.pack_command(args)
            return packed
        except TypeError:
            chunks: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
            return b"".join(chunks)


class FastConnection(_HiredisPacking, aioredis.Connection):
    """A plain connection that packs with hiredis."""


class FastSSLConnection(_HiredisPacking, aioredis.SSLConnection):
    """A TLS connection that packs with hiredis."""


class AnyNodeConnection(AddressRotation, FastConnection):
    """A plain connection to whichever of the cluster's URL addresses answers."""


class AnyNodeSSLConnection(AddressRotation, FastSSLConnection):
    """A TLS connection to whichever of the cluster's URL addresses answers."""


class MasterConnection(_HiredisPacking, SentinelManagedConnection):
    """A sentinel-managed connection that asks the sentinels where the master is on
    every (re)connect.

    redis-py 7 reconnects through `connect_check_health()`, which its sentinel
    connection does not override: after a failover, a connection dropped because the
    old master turned READONLY reconnected to that same old master, so every retry of
    the command failed again.
    """

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(
            check_health=check_health, retry_socket_connect=retry_socket_connect
        )


class MasterSSLConnection(MasterConnection, FastSSLConnection):
    """MasterConnection over TLS."""


class SentinelMasterClient(aioredis.Redis):
    """A client of the current master that also closes its sentinel connections.

    redis-py's `master_for` leaves the Sentinel's own clients open when the master
    client is closed; an owner that calls `aclose()` expects everything released.
    """

    sentinel_manager: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel_manager is not None:
            for sentinel in self.sentinel_manager.sentinels:
                await sentinel.aclose()
