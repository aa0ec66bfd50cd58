"""Calling a handler: async on the loop, sync in a bounded thread pool; every outcome a value."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..queue.context import AsyncHandler, Handler, SyncHandler
from ..queue.payload import JobPayload

__all__ = ["HandlerThreads", "Outcome", "Raised", "Returned", "is_async_handler", "start_handler"]


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned `value`."""

    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler raised `error` (any BaseException: each one ends the attempt)."""

    error: BaseException


Outcome = Returned | Raised


def is_async_handler(handler: Handler) -> bool:
    """An `async def` (or an object whose __call__ is one): it runs on the event loop."""
    call = getattr(type(handler), "__call__", None)  # noqa: B004 (the class's, not the object's)
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


async def _call_async(handler: AsyncHandler, payload: JobPayload) -> Outcome:
    try:
        return Returned(await handler(payload))
    # Everything a handler raises is the attempt's outcome, even SystemExit and
    # CancelledError. Caught here, inside the handler's task: an asyncio task that
    # raises SystemExit or KeyboardInterrupt re-raises it out of the event loop.
    except BaseException as exc:
        return Raised(exc)


def _call_sync(handler: SyncHandler, payload: JobPayload) -> Outcome:
    try:
        value = handler(payload)
    except BaseException as exc:  # as in _call_async (a thread must not die of it either)
        return Raised(exc)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it, so Python does not warn later
        return Raised(TypeError("a sync handler returned an awaitable: declare it `async def`"))
    return Returned(value)


class HandlerThreads:
    """At most `size` daemon threads running sync handlers, started as needed.

    Daemon threads, unlike ThreadPoolExecutor's: a handler stuck in a blocking call
    must not keep a stopped worker process from exiting (its job was given back)."""

    def __init__(self, size: int, name: str = "handler") -> None:
        self.size = size
        self._name = name
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._busy = 0

    def submit(self, work: Callable[[], None]) -> None:
        """Run `work()` in a thread; queued while all `size` threads are busy."""
        with self._lock:
            self._busy += 1
            if self._busy > len(self._threads) and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._work.put(work)

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            try:
                work()
            finally:
                with self._lock:
                    self._busy -= 1

    def shutdown(self) -> None:
        """Let idle threads end; busy ones end when their handler returns."""
        for _ in self._threads:
            self._work.put(None)


def start_handler(
    handler: Handler,
    payload: JobPayload,
    *,
    run_async: bool,
    context: contextvars.Context,
    threads: HandlerThreads | None,
    name: str,
    on_end: Callable[[], None],
) -> asyncio.Future[Outcome]:
    """Start one call of `handler` in `context`; the future holds its outcome, and
    `on_end()` is called on the loop once the call really returned (a thread cannot be
    cancelled, so a cancelled future may come long before that)."""
    loop = asyncio.get_running_loop()
    if run_async:
        coroutine = _call_async(handler, payload)
        task = loop.create_task(coroutine, name=name, context=context)
        task.add_done_callback(lambda _: on_end())
        return task
    assert threads is not None
    future: asyncio.Future[Outcome] = loop.create_future()

    def finish(outcome: Outcome) -> None:
        if not future.done():
            future.set_result(outcome)
        on_end()

    def work() -> None:
        outcome = context.run(_call_sync, handler, payload)
        # RuntimeError: the loop is closed, the worker is gone; nobody waits for it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(finish, outcome)

    threads.submit(work)
    return future
