"""The queue's Lua scripts bound to one client, callable alone or queued in a pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from ..redis.script import LuaScript
from ..redis.url import RedisClient

__all__ = ["QueueScript", "QueueScripts", "run_pipelined"]


class QueueScript(LuaScript):
    """A LuaScript that can also be sent inside a pipeline (EVALSHA by its digest)."""

    async def digest(self, keys: list[str]) -> str:
        """The script's SHA1, loading it first if this client has not yet."""
        if self._sha is None:
            self._sha = await self._load(keys)
        return self._sha

    @property
    def loaded_digest(self) -> str | None:
        """The SHA1 once loaded through this object, else None."""
        return self._sha

    def forget(self) -> None:
        """Drop the cached digest; the next call loads the script again."""
        self._sha = None


class QueueScripts:
    """One QueueScript per `lua/queue_*.lua` file, for one client."""

    def __init__(self, client: RedisClient) -> None:
        self.enqueue = QueueScript(client, "queue_enqueue")
        self.claim = QueueScript(client, "queue_claim")
        self.complete = QueueScript(client, "queue_complete")
        self.fail = QueueScript(client, "queue_fail")
        self.renew = QueueScript(client, "queue_renew")
        self.reap_scan = QueueScript(client, "queue_reap_scan")
        self.promote = QueueScript(client, "queue_promote")
        self.expire = QueueScript(client, "queue_expire")
        self.heartbeat = QueueScript(client, "queue_heartbeat")
        self.dead_requeue = QueueScript(client, "queue_dead_requeue")
        self.dead_purge = QueueScript(client, "queue_dead_purge")


async def run_pipelined(
    client: RedisClient,
    script: QueueScript,
    calls: Sequence[tuple[list[str], list[Any]]],
) -> list[Any]:
    """Run `script` once per (keys, args) in one pipeline (one round trip).

    Each reply is the script's result or the exception it raised, in order. A NOSCRIPT
    reply (SCRIPT FLUSH, restart, failover) reloads the script and re-runs just those
    calls: NOSCRIPT means the call did not run, so re-running it is safe.
    """
    if not calls:
        return []
    sha = await script.digest(calls[0][0])
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        # Not pipe.evalsha(): redis-py's cluster pipeline refuses that method by name.
        pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    replies: list[Any] = await pipe.execute(raise_on_error=False)
    if any(isinstance(reply, NoScriptError) for reply in replies):
        script.forget()
        for index, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                keys, args = calls[index]
                try:
                    replies[index] = await script(keys, args)
                except Exception as exc:  # reported in place, like the pipeline does
                    replies[index] = exc
    return replies
