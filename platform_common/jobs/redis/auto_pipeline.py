"""Auto-pipelining: commands issued concurrently share one round trip.

A lone command runs at once through the client. Commands issued while one is in flight
wait for it, then all go out together as one pipeline (and those issued meanwhile as
the next). A worker completing N jobs at once thus pays one write and one read for all
of them instead of N pool checkouts and N round trips: this is what keeps one worker's
drain at the speed of raw BRPOP. Only public redis-py API is used, so it runs the same
on a single node, behind Sentinel and on a cluster (a cluster pipeline fans out per
node).

Every command sent through here must be safe to repeat: redis-py re-sends a pipeline
after a dropped connection. The queue scripts recognise their own replays (by nonce or
lease token).
"""

from __future__ import annotations

import asyncio
from typing import Any

from .script import Command, run_command, run_pipelined
from .url import RedisClient

__all__ = ["AutoPipeline"]


class AutoPipeline:
    """Runs commands on `client`, pipelining those issued while another is in flight."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._busy = False
        self._waiting: list[tuple[Command, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def execute(self, command: Command) -> Any:
        """The command's reply; its error (a ResponseError, a lost connection) raised."""
        if self._busy:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiting.append((command, future))
            return await future
        self._busy = True
        try:
            return await run_command(self._client, command)
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        """After a command: flush what queued up meanwhile, or become idle."""
        if self._waiting:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        else:
            self._busy = False

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                live = [(command, future) for command, future in batch if not future.done()]
                if not live:
                    continue
                try:
                    replies = await run_pipelined(self._client, [command for command, _ in live])
                except BaseException as exc:
                    error = exc if isinstance(exc, Exception) else asyncio.CancelledError()
                    for _, future in live:
                        if not future.done():
                            future.set_exception(error)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, future), reply in zip(live, replies, strict=True):
                    if future.done():
                        continue
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        finally:
            self._busy = False

    async def aclose(self) -> None:
        """Let a flush in progress finish (its callers are waiting for it)."""
        if self._flusher is not None and not self._flusher.done():
            await asyncio.wait({self._flusher}, timeout=5)
