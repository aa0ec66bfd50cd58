"""Auto-pipelining for the queue's hot path: commands issued concurrently share one
round trip, on a connection held for the purpose.

Commands issued in the same turn of the event loop go out together, in one write, at
the end of that turn; those issued while a batch is in flight go out as the next one.
A worker that takes its next jobs while its last ones' completions are recorded thus
pays one round trip for both, not N pool checkouts and N round trips. A batch runs to
its end in a task of its own, whatever happens to the callers waiting for it.

Transport: on a single node and behind Sentinel, one connection of the client's own
connection class, held for life, with a reply timeout on each round trip
(HeldConnection._watch), through redis-py's public connection API only: its
per-command path (pool checkout with a health probe, retry wrapper, a `wait_for` Task
per write) costs more than the round trip itself on a small machine. On a cluster the
batch goes out as a redis-py cluster pipeline (one round trip per node).

The replies of the scripts named `undecoded` are read as Redis sent them (bytes, not
decoded): a caller that returns stored bytes (the claim returns payloads) decodes each
itself, so one value that is not UTF-8 costs only its own entry, never the reply or
the batch (a strict decode of the whole reply would fail all of it).

Every command sent through here must be safe to repeat: a batch is re-sent after a
dropped connection. The queue scripts recognise their own replays (by nonce, lease
token, or for a claim that takes jobs off the queue itself, the marker named by its
first token); a repeated LMOVE at worst leaves an extra id in processing for the reaper.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .script import Command, Replies, Script, Send, pipeline_transport, run_batch
from .url import RedisClient

__all__ = ["AutoPipeline"]

RETRIES = 3
"""Re-sends of a batch after a dropped connection (with backoff), like the pooled client."""

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)

Undecoded = Callable[[tuple[Any, ...]], bool]
"""Whether a command's reply is read undecoded (bytes)."""


def undecoded_scripts(scripts: Iterable[Script]) -> Undecoded:
    """True for a call of one of `scripts`, by digest or by source."""
    names = frozenset(name for script in scripts for name in (script.sha, script.source))
    if not names:
        return lambda command: False

    def undecoded(command: tuple[Any, ...]) -> bool:
        # A source is hashed once (str caches its hash): a set lookup either way.
        return command[0] in ("EVALSHA", "EVAL") and command[1] in names

    return undecoded


class HeldConnection:
    """One connection, made with the client's own connection class and options, that
    sends batches and reads their replies in order (errors returned in place)."""

    def __init__(self, client: aioredis.Redis, undecoded: Undecoded) -> None:
        self._undecoded = undecoded
        pool = client.connection_pool
        self._timeout: float | None = pool.connection_kwargs.get("socket_timeout")
        # No socket timeout on the connection itself: each batch gets one timeout below.
        options = pool.connection_kwargs | {"socket_timeout": None}
        self._connection: AbstractConnection = pool.connection_class(**options)
        self._closed = False
        # The reply deadline (loop time) and waiting task of the round trip in flight (_watch).
        self._deadline: float | None = None
        self._waiter: asyncio.Task[Any] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._timed_out = False

    async def send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        delay = 0.05
        for attempt in range(RETRIES + 1):
            try:
                return await self._round_trip(commands)
            except _TRANSIENT:
                if attempt == RETRIES or self._closed:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 4, 2.0)
        raise AssertionError("unreachable")

    async def _round_trip(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        if self._closed:
            raise RedisConnectionError("the auto-pipeline is closed")
        connection = self._connection
        if not connection.is_connected:
            try:
                async with asyncio.timeout(self._timeout):
                    await connection.connect()  # type: ignore[no-untyped-call]
            except TimeoutError:
                raise RedisTimeoutError(f"no connection within {self._timeout} s") from None
        if self._timeout is not None:
            self._watch(self._timeout)
        try:
            await connection.send_packed_command(
                connection.pack_commands(commands), check_health=False
            )
            undecoded = self._undecoded
            return [await _read(connection, undecoded(command)) for command in commands]
        except BaseException as exc:
            waiter, timed_out = self._waiter, self._timed_out
            self._end_watch()  # before the await below: nothing left to cancel
            # The reply stream is in an unknown state: drop it, reconnect on next use.
            await connection.disconnect(nowait=True)
            # Our own cancel only (uncancel: no other cancel is pending) is a timeout.
            if (
                timed_out
                and isinstance(exc, asyncio.CancelledError)
                and waiter is not None
                and waiter.uncancel() == 0
            ):
                raise RedisTimeoutError(f"no reply from Redis within {self._timeout} s") from None
            raise
        finally:
            self._end_watch()

    def _end_watch(self) -> None:
        self._deadline = self._waiter = None
        self._timed_out = False

    def _watch(self, timeout: float) -> None:
        """Give the round trip about to start `timeout` seconds. What asyncio.timeout
        does, at a fraction of its cost (a timer scheduled and cancelled per round trip
        was a tenth of a lone enqueue's client time): one timer that, when it fires,
        cancels the waiter if its deadline has passed, else re-arms for that deadline."""
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + timeout
        self._waiter = asyncio.current_task()
        if self._watchdog is None:
            self._watchdog = loop.call_at(self._deadline, self._on_watchdog)

    def _on_watchdog(self) -> None:
        self._watchdog = None
        deadline, waiter = self._deadline, self._waiter
        if deadline is None or waiter is None or waiter.done():
            return  # nothing in flight: the next round trip arms it again
        loop = asyncio.get_running_loop()
        if deadline - loop.time() > 0.001:  # (a timer may fire a hair early)
            self._watchdog = loop.call_at(deadline, self._on_watchdog)
        elif not self._timed_out:
            self._timed_out = True
            waiter.cancel()

    async def aclose(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        await self._connection.disconnect()


async def _read(connection: AbstractConnection, undecoded: bool) -> Any:
    """One reply; an error reply is returned (the stream stays in step), not raised."""
    try:
        return await connection.read_response(disable_decoding=undecoded)
    except ResponseError as exc:
        return exc


class AutoPipeline:
    """Runs commands on `client`, batching those issued in one turn of the event loop or
    while a batch is in flight. The replies of the `undecoded` scripts are bytes."""

    def __init__(self, client: RedisClient, undecoded: Iterable[Script] = ()) -> None:
        raw = undecoded_scripts(undecoded)
        self._held = HeldConnection(client, raw) if isinstance(client, aioredis.Redis) else None
        self._send: Send = self._held.send if self._held else pipeline_transport(client, raw)
        self._waiting: list[tuple[Sequence[Command], asyncio.Future[Replies]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._eager_in_flight = False
        self._batch_in_flight = False

    async def execute(self, command: Command, *, eager: bool = False) -> Any:
        """The command's reply; its error (a ResponseError, a lost connection) raised.

        `eager`: when nothing is queued or in flight, send it now, from the caller's own
        task, instead of at the end of this turn of the loop. For a caller that issues
        one command at a time (a producer's enqueue): it saves a task, a future and two
        loop turns, about a tenth of a lone enqueue's client time. Commands issued
        meanwhile queue up and go out as the next batch when it returns. Not for a
        worker, whose take and completions should share a turn's write. Cancelling the
        caller cuts the round trip (the connection is dropped and reconnected), as with
        any redis-py call: only for commands that are safe to repeat or lose."""
        # The flusher may be alive between two batches (its one turn for the callers it
        # answered): what matters is that nothing waits and nothing is on the wire.
        if eager and not self._waiting and not self._batch_in_flight and not self._eager_in_flight:
            self._eager_in_flight = True
            try:
                reply = (await run_batch(self._send, [command]))[0]
            finally:
                self._eager_in_flight = False
                self._start_flusher()
        else:
            reply = (await self.execute_many([command]))[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def execute_many(self, commands: Sequence[Command]) -> Replies:
        """Run `commands` back to back in one batch; each reply or error in place."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Replies] = loop.create_future()
        self._waiting.append((commands, future))
        self._start_flusher()
        return await future

    def _start_flusher(self) -> None:
        """Start the task that sends what waits, unless one runs or an eager command is
        in flight on the connection (it starts one when its reply is in)."""
        if self._flusher is None and self._waiting and not self._eager_in_flight:
            # Its first step runs after the callbacks of this turn of the loop: what they
            # issue joins the batch. An empty context: the batch is no one caller's.
            loop = asyncio.get_running_loop()
            self._flusher = loop.create_task(self._flush(), context=contextvars.Context())

    async def _flush(self) -> None:
        try:
            # An eager command on the wire has the connection: wait for its end (it
            # starts a flusher then, if this one has gone).
            while self._waiting and not self._eager_in_flight:
                batch, self._waiting = self._waiting, []
                live = [(commands, future) for commands, future in batch if not future.done()]
                if not live:
                    continue
                merged = [command for commands, _ in live for command in commands]
                self._batch_in_flight = True
                try:
                    replies = await run_batch(self._send, merged)
                except BaseException as exc:
                    self._batch_in_flight = False
                    error = exc if isinstance(exc, Exception) else RedisConnectionError("closed")
                    for _, future in live:
                        if not future.done():
                            future.set_exception(error)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                self._batch_in_flight = False
                start = 0
                for commands, future in live:
                    part = Replies(replies[start : start + len(commands)])
                    part.round_trips = replies.round_trips
                    start += len(commands)
                    if not future.done():
                        future.set_result(part)
                # One turn of the loop for the callers just answered: what they issue
                # next (a worker's claim after its take) joins the next batch.
                await asyncio.sleep(0)
        finally:
            self._flusher = None

    async def aclose(self) -> None:
        """Let a batch in flight finish (its callers wait for it), then disconnect."""
        if self._flusher is not None and not self._flusher.done():
            await asyncio.wait({self._flusher}, timeout=5)
        if self._held is not None:
            await self._held.aclose()
