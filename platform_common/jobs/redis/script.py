"""Loads the package's Lua scripts once and runs them; a NOSCRIPT reply reloads them."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

from .url import RedisClient

__all__ = ["LuaScript", "lua_source"]


@cache
def lua_source(name: str) -> str:
    """The text of `lua/<name>.lua`, read from the installed package once."""
    return resources.files("platform_common.jobs").joinpath("lua", f"{name}.lua").read_text("utf-8")


class LuaScript:
    """One `.lua` file bound to a client. EVALSHA first; on NOSCRIPT (after SCRIPT FLUSH,
    a restart or a failover) it loads the script again and retries once."""

    def __init__(self, client: RedisClient, name: str) -> None:
        self.name = name
        self._client = client
        self._source = lua_source(name)
        self._sha: str | None = None

    async def __call__(self, keys: list[str], args: list[Any]) -> Any:
        if self._sha is None:
            self._sha = await self._load(keys)
        try:
            return await self._client.evalsha(self._sha, len(keys), *keys, *args)  # type: ignore[misc]
        except NoScriptError:
            self._sha = await self._load(keys)
            return await self._client.evalsha(self._sha, len(keys), *keys, *args)  # type: ignore[misc]

    async def _load(self, keys: list[str]) -> str:
        # On a cluster, load on the node that owns the keys' slot.
        from redis.asyncio.cluster import RedisCluster

        if isinstance(self._client, RedisCluster) and keys:
            await self._client.initialize()  # idempotent; the slot map is empty before it
            node = self._client.get_node_from_key(keys[0])
            sha = await self._client.execute_command("SCRIPT LOAD", self._source, target_nodes=node)
            return str(sha)
        return str(await self._client.script_load(self._source))
